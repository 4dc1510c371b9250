"""``python -m mtdnn.distill [TEACHERS_SPEC] STUDENT_SPEC``: distil teacher ensembles into one multi-task student.

MT-DNN-KD (Liu et al. 2019, arXiv 1904.09482), stage 2b. With two specs the teachers are built (or resumed) first
(:mod:`mtdnn.teachers`); with one, the student spec's ``teachers`` directory must hold a finished build::

    python -m mtdnn.distill teachers/glue.yaml students/glue.yaml --from-run runs/<mt-run> --data-dir ../shared/data
    python -m mtdnn.distill students/glue.yaml --data-dir ../shared/data

The student is trained with the multi-task trainer, schedule and metrics of :mod:`mtdnn.training.module`; only the
loss of a ``distill`` task changes (:func:`mtdnn.modeling.losses.distillation_cross_entropy`, ``distillation_mse``): the
soft targets are the teacher members' cached logits, looked up by the batch's row positions. ``gold`` tasks are
trained on their labels only. The student run directory is a normal run directory (:mod:`mtdnn.training.runs`) plus
``report.json`` and ``report.md``: per task each member's dev score, their mean and standard deviation, the
ensemble's and the student's score, and the same averaged over tasks.
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import AutoConfig

from ..errors import ConfigError, check_bools
from ..fileio import write_atomic, write_json_atomic
from ..modeling.heads import resolve_pooling
from ..modeling.model import load_encoder, load_tokenizer, resolve_encoder
from ..tasks.data import check_files
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from ..tasks.tokenized import check_max_length, tokenized_split
from ..training import pipeline
from ..training.config import TrainConfig
from ..training.flags import check_trainer_flags
from ..training.pipeline import check_positions
from ..training.resolve import config_is_global_zero, datamodule_for
from ..training.rundirs import check_unfinished
from ..training.runs import RUN_ENTRIES, Run, check_run_dir
from . import piece_targets, teachers
from .soft_targets import read_manifest, teacher_outputs
from .specs import TeacherSpec
from .student_init import resolve_init, select_layers, student_encoder, truncate_layers  # noqa: F401 - the API
from .student_model import DistillationDataModule, DistillationModule, SoftTargetCollator  # noqa: F401 - the API
from .student_report import render_report, student_report
from .student_spec import InitSpec, StudentSpec, StudentTrainSpec  # noqa: F401 - the API

log = logging.getLogger("mtdnn.distill")

REPORT_JSON, REPORT_MD = "report.json", "report.md"
INIT_ENCODER_DIR = "init_encoder"
STUDENT_ENTRIES = frozenset({REPORT_JSON, REPORT_MD, INIT_ENCODER_DIR})
"""What a student run writes beside a training run's files (replaced with them)."""


def check_covered(spec: StudentSpec, spec_path: str, teacher_tasks: list[str], where: object) -> None:
    """A ``distill`` task without teachers (hence without soft targets) is an error (ConfigError)."""
    uncovered = [n for n in spec.distill if n not in teacher_tasks]
    if uncovered:
        raise ConfigError(f"{spec_path}: field 'distill': task(s) {', '.join(uncovered)} have no soft targets ("
                          f"teachers in {where} cover {', '.join(teacher_tasks)}); build teachers for them or list "
                          "them under 'gold'")


def student_tasks(spec: StudentSpec, spec_path: str, teacher_tasks: list[str] | None = None) -> dict[str, TaskDef]:
    """The student's tasks (distill then gold), with ``loss_weights`` applied.

    Raises:
        ConfigError: an unknown task, a task without a train split, no dev split at all, or (with
            ``teacher_tasks``) a distill task the teachers do not cover.
    """
    all_tasks = load_task_defs(spec.task_defs)
    tasks = select_tasks(all_tasks, spec.distill + spec.gold, f"{spec_path}: fields 'distill'/'gold'")
    for name, task in tasks.items():
        if "train" not in task.splits:
            raise ConfigError(f"{spec_path}: task '{name}' has no train split; it can be evaluated, not trained")
    if not any("dev" in t.splits and t.kind.selected for t in tasks.values()):
        raise ConfigError(f"{spec_path}: none of the tasks has a dev split to select the student on")
    for name in spec.distill:
        if tasks[name].kind.soft_targets is None:
            raise ConfigError(f"{spec_path}: field 'distill': task '{name}' is a {tasks[name].type} task, which has "
                              "no soft targets; list it under 'gold'")
    if teacher_tasks is not None:
        check_covered(spec, spec_path, teacher_tasks, "the teacher spec")
    return {n: t.model_copy(update={"loss_weight": spec.loss_weights[n]}) if n in spec.loss_weights else t
            for n, t in tasks.items()}


def distill(spec: StudentSpec, spec_path: str, teacher_spec: TeacherSpec | None = None,
            teacher_spec_path: str | None = None, *, data_dir: Path, from_run: str | None = None,
            teachers_dir: str | None = None, output_dir: str | None = None, lightning: dict | None = None,
            overwrite: bool = False, retrain_changed: bool = False, resume: bool = False) -> Run:
    """Build (or resume) the teachers of ``teacher_spec`` when given, then train, export and report the student.

    Args:
        spec_path, teacher_spec_path: name the specs in messages (their files).
        from_run, teachers_dir, output_dir: override the specs' ``from_run``, teacher directory and ``output_dir``.
        lightning: Lightning settings (:class:`~mtdnn.training.config.TrainConfig` fields) of every training run.
        overwrite: replace a student run directory holding a run (complete or interrupted).
        resume: continue the interrupted student in the run directory from its ``last.ckpt``.

    Returns:
        The student's :class:`~mtdnn.training.runs.Run`.

    Raises:
        ConfigError, DataError, CheckpointError: bad specs, data, teachers or runs, before anything is built.
        Interrupted: a teacher member's or the student's training was interrupted.
    """

    check_bools("distill()", overwrite=overwrite, resume=resume)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")

    # a bad Lightning flag fails before any teacher or student run starts
    check_trainer_flags(student_config(spec, {}, data_dir, "packaged-minilm", ".", lightning))
    # 1. Both specs, the student's tasks and (without a teacher spec) the teacher build they need, before anything
    # is built.
    tasks = student_tasks(spec, spec_path, teacher_spec.tasks if teacher_spec else None)
    teacher_dir = Path(teachers_dir or spec.teachers) if teachers_dir or spec.teachers else None
    if teacher_spec is not None:
        teacher_dir = Path(teachers_dir or teacher_spec.output_dir)
        if spec.teachers and Path(spec.teachers).resolve() != teacher_dir.resolve():
            log.info("using the teachers of %s in %s (not %s)", teacher_spec_path, teacher_dir, spec.teachers)
    elif spec.distill and teacher_dir is None:
        raise ConfigError(f"{spec_path}: field 'teachers': distill tasks need a teacher directory (set teachers, "
                          "pass --teachers-dir, or give the teacher spec before the student spec)")
    elif spec.distill:
        check_covered(spec, spec_path, list(read_manifest(teacher_dir)["tasks"]), teacher_dir)
    for task in tasks.values():
        check_files(task, [s for s in ("train", "dev") if s in task.splits], data_dir)
    flag = "--output-dir" if output_dir else f"{spec_path}: field 'output_dir'"
    student_dir = check_run_dir(output_dir or spec.output_dir, flag)
    if config_is_global_zero(student_config(spec, {}, data_dir, "packaged-minilm", ".", lightning)):
        check_unfinished(student_dir, overwrite, resume, flag)  # other DDP ranks start after rank 0 wrote it
    run = from_run or spec.from_run or (teacher_spec.from_run if teacher_spec else None)
    # 2. With a teacher spec, the teachers are built (or resumed) now (per-piece soft targets: once the student's
    # tokenizer is known to be the members').
    if teacher_spec is not None:
        if run:  # the student's tokenizer, pieces and lengths fit, before any teacher is built
            source, _ = resolve_init(spec, spec_path, run, teacher_dir)
            tokenizer = load_tokenizer(source)
            if piece_targets.piece_tasks([tasks[n] for n in spec.distill]):
                piece_targets.check_before_build(tokenizer, source, run, [tasks[n] for n in spec.distill], spec_path,
                                                 spec.train.max_length, teacher_spec.finetune.max_length)
            for task in tasks.values():
                check_max_length(task, tokenizer, spec.train.max_length,
                                 f"{spec_path}: field 'train.max_length'" if spec.train.max_length else
                                 f"{spec.task_defs}: task '{task.name}': max_length")

            try:
                check_positions(student_config(spec, tasks, data_dir, source, ".", lightning), tasks,
                                AutoConfig.from_pretrained(resolve_encoder(source)))
            except ConfigError as err:
                raise ConfigError(f"{spec_path}: {err}") from None
        teacher_dir = teachers.build(teacher_spec, teacher_spec_path or "teacher spec", data_dir, from_run,
                                     teachers_dir, lightning, retrain_changed)
    manifest = read_manifest(teacher_dir) if teacher_dir is not None and spec.distill else None
    return train_student(spec, spec_path, tasks, data_dir, teacher_dir, manifest, from_run=from_run,
                         output_dir=output_dir, lightning=lightning, overwrite=overwrite, resume=resume)


def student_config(spec: StudentSpec, tasks: dict[str, TaskDef], data_dir: Path, encoder: str, run_dir: str,
                   lightning: dict | None) -> TrainConfig:
    """The student's :class:`~mtdnn.training.config.TrainConfig`: the spec's ``train`` settings, its tasks, the
    encoder it starts from and the Lightning settings."""
    train = spec.train.model_dump()
    return TrainConfig(task_defs=spec.task_defs, tasks=list(tasks) or None, data_dir=str(data_dir), encoder=encoder,
                       output_dir=str(run_dir), **train, **(lightning or {}))


def train_student(spec: StudentSpec, spec_path: str, tasks: dict[str, TaskDef], data_dir: Path,
                  teacher_dir: Path | None, manifest: dict | None, *, from_run: str | None = None,
                  output_dir: str | None = None, lightning: dict | None = None, overwrite: bool = False,
                  resume: bool = False) -> Run:
    """Validate the soft targets, then train, export and report the student (see the module docstring) through
    the training pipeline (:mod:`mtdnn.training.pipeline`): every check of ``train`` applies, and an interrupted
    student continues with ``resume``."""

    cfg = spec.train
    # 1. The starting point and the soft targets, checked before the run directory is made.
    mt_run = from_run or spec.from_run or (manifest or {}).get("from_run")
    if mt_run:
        teachers.warn_if_limited(mt_run, "the student starts")
    source, heads_from = resolve_init(spec, spec_path, mt_run, teacher_dir)
    tokenizer = load_tokenizer(source)
    truncated = student_encoder(source, spec.init, spec_path)
    try:
        tasks = resolve_pooling(tasks, truncated if truncated is not None else load_encoder(source))
    except ConfigError as err:
        raise ConfigError(f"{spec.task_defs}: {err}") from None
    soft_targets, teacher_report = {}, None
    distill = list(spec.distill)
    if distill:  # per-piece soft targets: the teachers' tokenizer and pieces (ConfigError)
        piece_targets.check_student(tokenizer, source, teacher_dir, [tasks[n] for n in distill], data_dir,
                                    cfg.max_length, spec_path)
    for name in distill:
        rows = tokenized_split(tasks[name], "train", data_dir, tokenizer, cfg.max_length)
        soft_targets[name] = (rows.ids, teacher_outputs(teacher_dir, tasks[name], "train", data_dir, rows.ids,
                                                        rows=rows))
    if distill:
        # the teachers scored on the rows the student is scored on (its limit_eval_examples, else all of dev)
        teacher_report = teachers.summarize(teacher_dir, {n: tasks[n] for n in distill}, data_dir,
                                            rows=cfg.limit_eval_examples)
    run_dir = Path(output_dir or spec.output_dir)
    config = student_config(spec, tasks, data_dir, source, str(run_dir), lightning)
    # a truncated encoder is saved in the run directory (prepare) and trained from there
    encoder = str((run_dir / INIT_ENCODER_DIR).resolve()) if truncated is not None else source

    def module_factory(config: TrainConfig, encoder: str, tasks: dict[str, TaskDef], encoder_model):
        return DistillationModule(encoder, {n: t.to_plain() for n, t in tasks.items()}, distill_tasks=distill,
                                  temperature=spec.temperature, alpha=spec.alpha, lr=config.lr,
                                  weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio,
                                  dropout=config.dropout, trust_remote_code=config.trust_remote_code,
                                  encoder_model=encoder_model)

    def datamodule_factory(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer):
        return datamodule_for(config, tasks, tokenizer, DistillationDataModule, soft_targets=soft_targets)

    def prepare(plan) -> None:
        if truncated is not None:
            truncated.save_pretrained(plan.run_dir / INIT_ENCODER_DIR)
            tokenizer.save_pretrained(plan.run_dir / INIT_ENCODER_DIR)

    def report(summary: dict, run_dir: Path) -> None:
        result = student_report(teacher_report, summary["best"], distill, spec.gold, tasks, run_dir, spec)
        write_json_atomic(run_dir / REPORT_JSON, result)
        markdown = render_report(result, f"Distillation: {run_dir} (T = {spec.temperature:g}, alpha = {spec.alpha:g})")
        write_atomic(run_dir / REPORT_MD, markdown)

    resolved = {"spec": str(spec_path), "student": spec.model_dump(mode="json"),
                "teachers": str(teacher_dir) if teacher_dir else None, "from_run": mt_run, "encoder": source}
    flag = "--output-dir" if output_dir else f"{spec_path}: field 'output_dir'"
    # 2. Train with the multi-task pipeline: the checks, Trainer and outputs of mtdnn.train.
    plan = pipeline.plan(config, overwrite=overwrite, resume=resume, command="distill", tasks=tasks,
                         encoder=encoder, source_encoder=source, encoder_model=truncated, tokenizer=tokenizer,
                         heads_from=heads_from, module_factory=module_factory, datamodule_factory=datamodule_factory,
                         resolved=resolved, entries=RUN_ENTRIES | STUDENT_ENTRIES, prepare=prepare, report=report,
                         output_flag=flag)
    pipeline.execute(plan)
    return Run(run_dir)
