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
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator
from torch.utils.data import DataLoader

from . import teachers
from ..errors import ConfigError
from ..tables import markdown_table
from ..fileio import write_atomic, write_json_atomic, yaml_float
from ..training.datamodule import MultiTaskDataModule
from ..training.module import MultiTaskModule
from ..modeling.losses import DISTILLATION_LOSSES
from . import piece_targets
from .batch_targets import batch_targets
from .soft_targets import align, read_manifest, teacher_outputs
from .specs import Spec, TeacherSpec
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from ..training.config import LIGHTNING_FIELDS, RUN_FIELDS, TrainConfig, overrides_model
from ..training.runs import Run, check_run_dir

log = logging.getLogger("mtdnn.distill")

REPORT_JSON, REPORT_MD = "report.json", "report.md"
INIT_ENCODER_DIR = "init_encoder"
STUDENT_ENTRIES = frozenset({REPORT_JSON, REPORT_MD, INIT_ENCODER_DIR})
"""What a student run writes beside a training run's files (replaced with them)."""


# ----------------------------------------------------------------------------------------------------- spec


class InitSpec(Spec):
    """The student's starting point.

    ``encoder``: ``pretrained`` (the encoder the multi-task run started from; default), ``multitask`` (the
    multi-task run's encoder and the heads of matching tasks), or any Hugging Face name or path; never a teacher
    member. ``layers``: keep only these 0-based encoder layers (DistilBERT-style, Sanh et al. 2019,
    arXiv 1910.01108), e.g. ``[0, 2, 4]`` of a 6-layer encoder; not for ALBERT, whose layers share one set of
    weights. ``num_layers``: keep the first N layers; for ALBERT, run its shared layer N times.
    """

    encoder: str = "pretrained"
    layers: list[int] | None = Field(default=None, min_length=1)
    num_layers: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_layer_choice(self) -> "InitSpec":
        if self.layers is not None and self.num_layers is not None:
            raise ValueError("fields 'layers', 'num_layers': give one of them (a layer list or a layer count)")
        return self


StudentTrainSpec = overrides_model(
    "StudentTrainSpec", RUN_FIELDS + LIGHTNING_FIELDS + ("trust_remote_code",),
    """A student spec's ``train:``: overrides of the :class:`~mtdnn.training.config.TrainConfig` fields of the same
    names (validated by it; ``temperature`` is the task-sampling temperature, the distillation T is the spec's own
    ``temperature``); the Lightning settings come from the command line.""")


class StudentSpec(Spec):
    """A student spec (``students/*.yaml``); relative paths are relative to the working directory.

    ``distill``: tasks trained on soft targets and gold labels; ``gold``: tasks trained on gold labels only;
    ``temperature`` T > 0 and ``alpha`` in [0, 1] of the distillation loss; ``loss_weights``: per-task factors
    replacing the task definitions' ``loss_weight``; ``teachers``: the teacher directory; ``from_run``: the
    multi-task run for ``init`` (default: the one the teachers started from).
    """

    task_defs: str
    teachers: str | None = None
    from_run: str | None = None
    output_dir: str
    init: InitSpec = InitSpec()
    distill: list[str] = []
    gold: list[str] = []
    temperature: float = Field(default=1.0, gt=0)
    alpha: float = Field(default=0.5, ge=0, le=1)
    loss_weights: dict[str, float] = {}
    train: StudentTrainSpec = StudentTrainSpec()

    @field_validator("train", mode="before")
    @classmethod
    def _renamed(cls, value):
        if isinstance(value, dict) and "sampling_temperature" in value:
            raise ValueError("'sampling_temperature' is now 'temperature' (train: holds TrainConfig fields, by their "
                             "names; the distillation temperature T is the spec's own top-level 'temperature')")
        return value

    @field_validator("temperature", "alpha", mode="before")
    @classmethod
    def _floats(cls, value):
        return yaml_float(value)

    @field_validator("loss_weights", mode="before")
    @classmethod
    def _weights(cls, value):
        return {k: yaml_float(v) for k, v in value.items()} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _tasks(self) -> "StudentSpec":
        if not self.distill and not self.gold:
            raise ValueError("fields 'distill', 'gold': give at least one task")
        both = sorted(set(self.distill) & set(self.gold))
        if both:
            raise ValueError(f"fields 'distill', 'gold': task(s) {', '.join(both)} listed under both")
        names = self.distill + self.gold
        if len(set(names)) != len(names):
            raise ValueError(f"fields 'distill', 'gold': a task is listed twice ({names})")
        for name, weight in self.loss_weights.items():
            if name not in names:
                raise ValueError(f"field 'loss_weights.{name}': task '{name}' is not under distill or gold")
            if weight < 0:
                raise ValueError(f"field 'loss_weights.{name}': must be >= 0 (got {weight})")
        return self


# ------------------------------------------------------------------------------------------- research code


class SoftTargetCollator:
    """Wraps the training loader's :class:`~mtdnn.training.datamodule.TaskCollator`: a batch of a ``distill`` task also gets
    ``teacher_logits`` ``(batch, members, outputs)`` float32, the rows ``batch.idx`` of the task's soft targets
    (per-piece types: ``(batch, members, seq_len, width)``, :mod:`mtdnn.distillation.piece_targets`)."""

    def __init__(self, base, teacher_logits: dict):
        self.base, self.teacher_logits = base, teacher_logits

    def __call__(self, features: list[dict[str, Any]]) -> dict:
        batch = self.base(features)
        task_index = features[0].get("task_index", 0)
        if task_index in self.teacher_logits:
            batch.teacher_logits = self.teacher_logits[task_index].for_batch(batch)
        return batch


class DistillationDataModule(MultiTaskDataModule):
    """:class:`~mtdnn.training.datamodule.MultiTaskDataModule` whose training batches of ``distill`` tasks carry the teacher
    members' outputs.

    Args:
        soft_targets: ``{task: (ids, outputs)}`` with ``outputs`` ``(len(ids), members, outputs)`` float32 keyed by
            example id; aligned once, in :meth:`setup`, to the rows of the task's training split (an id of the
            split missing from ``ids`` is an error, never a silent misalignment).
        other arguments: see :class:`~mtdnn.training.datamodule.MultiTaskDataModule`.
    """

    def __init__(self, tasks: dict[str, TaskDef], data_dir: Path, tokenizer,
                 soft_targets: dict[str, tuple[list[str], np.ndarray]], **kwargs):
        super().__init__(tasks, data_dir, tokenizer, **kwargs)
        self.soft_targets = soft_targets
        self.teacher_logits: dict = {}  # task index -> batch_targets(...)

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        self.teacher_logits = {}
        for index, (name, split) in enumerate(zip(self.tasks, self.train_sets)):
            if name in self.soft_targets:
                ids, outputs = self.soft_targets[name]
                rows = align(ids, outputs, split.ids, f"soft targets of task '{name}'")
                self.teacher_logits[index] = batch_targets(rows)

    def train_dataloader(self) -> DataLoader:
        loader = super().train_dataloader()
        loader.collate_fn = SoftTargetCollator(loader.collate_fn, self.teacher_logits)
        return loader


class DistillationModule(MultiTaskModule):
    """The multi-task module with the knowledge-distillation loss on ``distill_tasks`` (MT-DNN-KD).

    For a distill task's batch, with s the student's outputs and the batch's ``teacher_logits``::

        classification, ranking: alpha * T^2 * CE(q, softmax(s / T)) + (1 - alpha) * CE(s, gold),
                                 q = mean over members of softmax(z_m / T)
        regression:              alpha * (s - mean_m p_m)^2 + (1 - alpha) * (s - y)^2
        sequence labelling:      the classification loss at each labelled piece (a word's first), averaged
                                 over the sentence's labelled pieces
        span extraction:         the mean of the classification losses of the start and of the end
                                 distribution over the window's pieces (see mtdnn.modeling.token_heads)

    with the per-example weights and global normaliser of :mod:`mtdnn.modeling.losses` (DDP-correct). Other tasks keep
    their gold loss. Hyper-parameters are plain Python values (checkpoints load with ``weights_only=True``); the
    soft targets come with the batches (:class:`DistillationDataModule`), never in the hyper-parameters.

    Args:
        distill_tasks: the tasks trained on soft targets. temperature: T > 0. alpha: in [0, 1].
        other arguments: see :class:`~mtdnn.training.module.MultiTaskModule`.
    """

    def __init__(self, encoder: str, tasks: dict[str, dict], distill_tasks: list[str], temperature: float = 1.0,
                 alpha: float = 0.5, **kwargs):
        if not temperature > 0 or not 0 <= alpha <= 1:
            raise ValueError(f"temperature must be > 0 and alpha in [0, 1] (got {temperature}, {alpha})")
        super().__init__(encoder, tasks, **kwargs)
        # MultiTaskModule's save_hyperparameters() records distill_tasks, temperature and alpha too.

    def forward(self, batch: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Training batches of distill tasks: ``(outputs, tempered)`` at the temperature (see
        :meth:`mtdnn.modeling.model.MultiTaskModel.forward`); otherwise the outputs."""
        if not (self.training and batch.task in self.hparams.distill_tasks):
            return super().forward(batch)
        return self.model(batch.task, batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs,
                          temperature=self.hparams.temperature)

    def task_loss(self, batch: dict, outputs) -> torch.Tensor:
        if batch.task not in self.hparams.distill_tasks:
            return super().task_loss(batch, outputs)
        outputs, tempered = outputs if isinstance(outputs, tuple) else (outputs, None)
        if batch.teacher_logits is None:
            raise RuntimeError(f"a batch of distill task '{batch.task}' has no teacher_logits "
                               "(use DistillationDataModule)")
        task = self.task_defs[batch.task]
        # The normaliser of MultiTaskModule.task_loss: global real examples / world size (see mtdnn.modeling.losses).
        loss = DISTILLATION_LOSSES[task.loss_name](outputs, batch.teacher_logits, batch.labels, batch.weight,
                                                   self.loss_normalizer(batch), self.hparams.temperature,
                                                   self.hparams.alpha, student_tempered=tempered)
        return task.loss_weight * loss


# ---------------------------------------------------------------------------------------------- student init


def resolve_init(spec: StudentSpec, spec_path: str, mt_run: str | None,
                 teacher_dir: Path | None) -> tuple[str, Path | None]:
    """The student's encoder (name or path) and the export whose matching heads it copies (``multitask``), or None.

    Raises:
        ConfigError: ``pretrained``/``multitask`` without a multi-task run, or a teacher member as the start.
        CheckpointError: the multi-task run is incomplete.
    """
    from ..modeling.model import resolve_encoder

    choice, heads_from = spec.init.encoder, None
    if choice in ("pretrained", "multitask"):
        if not mt_run:
            raise ConfigError(f"{spec_path}: field 'init.encoder': '{choice}' needs the multi-task run (set "
                              "from_run, pass --from-run, or give a teacher directory that names it)")
        export = teachers.multitask_export(mt_run, f"{spec_path}: field 'init.encoder' ('{choice}')")
        if choice == "pretrained":
            source = teachers.pretrained_encoder(Path(mt_run))
        else:
            heads_from, source = export, str(export / "encoder")
    else:
        source = choice
    if teacher_dir is not None:
        for candidate in (Path(resolve_encoder(source)), Path(mt_run) if mt_run else None):
            if candidate is not None and candidate.exists() and \
                    candidate.resolve().is_relative_to(Path(teacher_dir).resolve()):
                raise ConfigError(f"{spec_path}: field 'init.encoder': {candidate} is inside the teacher directory "
                                  f"{teacher_dir}; a student never starts from a teacher member (use pretrained, "
                                  "multitask or another encoder)")
    return source, heads_from


# Where each family keeps its list of separate layers (attribute path from the base model).
LAYER_LISTS = ("encoder.layer",      # BERT, RoBERTa, ELECTRA, DeBERTa-v2, MiniLM
               "transformer.layer",  # DistilBERT
               "layers",             # ModernBERT
               "layer")              # XLNet


def _layer_list(encoder: torch.nn.Module) -> tuple[torch.nn.Module, str, torch.nn.ModuleList] | None:
    for path in LAYER_LISTS:
        owner_path, _, attr = path.rpartition(".")
        owner = encoder
        for part in owner_path.split(".") if owner_path else []:
            owner = getattr(owner, part, None)
        blocks = getattr(owner, attr, None)
        if isinstance(blocks, torch.nn.ModuleList):
            return owner, attr, blocks
    return None


def _shares_layers(encoder: torch.nn.Module) -> bool:
    """ALBERT: one layer group's weights run ``num_hidden_layers`` times (Lan et al. 2019, arXiv 1909.11942)."""
    return hasattr(getattr(encoder, "encoder", None), "albert_layer_groups")


def select_layers(encoder: torch.nn.Module, layers: list[int], where: str) -> torch.nn.Module:
    """Keep only ``layers`` (0-based, increasing) of the encoder's separate layers, in place.

    DistilBERT (Sanh et al. 2019, arXiv 1910.01108) initialises its student from every other teacher layer.
    Works for every family with a list of separate layers (:data:`LAYER_LISTS`: BERT, RoBERTa, ELECTRA,
    DeBERTa-v2, DistilBERT, XLNet, ModernBERT). ModernBERT keeps each kept layer's attention type (global or
    local: ``config.layer_types``); its layer 0 must be kept, since it alone has no attention LayerNorm (it
    follows the embedding norm) and a reloaded student would rebuild its first layer that way.

    Raises:
        ConfigError: a shared-layer encoder (ALBERT: use ``num_layers``), an encoder without a known layer
            list, an index out of range or repeated, or a ModernBERT list without layer 0.
    """
    if _shares_layers(encoder):
        raise ConfigError(f"{where}: {type(encoder).__name__} shares one layer's weights across all its "
                          f"{encoder.config.num_hidden_layers} layers, so there are no separate layers to pick "
                          f"(got {layers}); set init.num_layers instead to run the shared layer fewer times")
    found = _layer_list(encoder)
    if found is None:
        raise ConfigError(f"{where}: {type(encoder).__name__} has no list of separate layers this toolkit knows "
                          f"({', '.join(LAYER_LISTS)}); layer selection supports BERT, RoBERTa, ELECTRA, DeBERTa-v2, "
                          "DistilBERT, XLNet and ModernBERT")
    owner, attr, blocks = found
    if any(not 0 <= i < len(blocks) for i in layers) or sorted(set(layers)) != list(layers):
        raise ConfigError(f"{where}: layers must be increasing indices in 0..{len(blocks) - 1} (got {layers})")
    if getattr(encoder.config, "model_type", "") == "modernbert" and layers[0] != 0:
        raise ConfigError(f"{where}: a ModernBERT student must keep layer 0, the only layer without an attention "
                          f"LayerNorm (got {layers})")
    setattr(owner, attr, torch.nn.ModuleList([blocks[i] for i in layers]))
    encoder.config.num_hidden_layers = len(layers)
    if isinstance(getattr(encoder.config, "layer_types", None), list):
        encoder.config.layer_types = [encoder.config.layer_types[i] for i in layers]
    return encoder


def truncate_layers(encoder: torch.nn.Module, num_layers: int, where: str) -> torch.nn.Module:
    """The first ``num_layers`` layers of the encoder, in place; for ALBERT, its shared layer run that many times.

    Raises:
        ConfigError: ``num_layers`` is not in 1..the encoder's layer count, or an ALBERT with several layer groups
            (which group a layer uses depends on the layer count).
    """
    total = encoder.config.num_hidden_layers
    if not 1 <= num_layers <= total:
        raise ConfigError(f"{where}: must be in 1..{total}, the encoder's layer count (got {num_layers})")
    if not _shares_layers(encoder):
        return select_layers(encoder, list(range(num_layers)), where)
    if getattr(encoder.config, "num_hidden_groups", 1) != 1:
        raise ConfigError(f"{where}: this ALBERT has {encoder.config.num_hidden_groups} layer groups; only one "
                          "shared group can be run a different number of times")
    encoder.config.num_hidden_layers = num_layers
    return encoder


def student_encoder(source: str, init: InitSpec, where: str) -> torch.nn.Module | None:
    """The student's encoder loaded from ``source`` with ``init.layers`` or ``init.num_layers`` applied; None
    when neither is set (the student is then ``source`` unchanged).

    Raises:
        ConfigError: see :func:`select_layers` and :func:`truncate_layers`.
    """
    from ..modeling.model import load_encoder

    if init.layers:
        return select_layers(load_encoder(source), init.layers, f"{where}: field 'init.layers'")
    if init.num_layers:
        return truncate_layers(load_encoder(source), init.num_layers, f"{where}: field 'init.num_layers'")
    return None


# ------------------------------------------------------------------------------------------------ reporting


def student_report(teacher_report: dict | None, best: dict, distill: list[str], gold: list[str],
                   tasks: dict[str, TaskDef], run_dir: Path, spec: StudentSpec) -> dict:
    """The teachers' report (:func:`mtdnn.teachers.summarize`) with the student's best-epoch dev scores added:
    per distill task and on their average; gold-only tasks listed apart."""
    from ..modeling.metrics import average_score

    def scores(name: str) -> dict:
        return {"dev": best["tasks"][name], "score": best["tasks"][name][tasks[name].metric_names[0]]}

    report = dict(teacher_report or {"tasks": {}, "average": {}})
    report["tasks"] = {n: {**report["tasks"][n], "student": scores(n)} for n in distill}
    report["average"] = dict(report["average"])
    if distill:
        report["average"]["student"] = average_score({n: best["tasks"][n] for n in distill},
                                                     {n: tasks[n].metric_names for n in distill})
    report["gold_tasks"] = {n: {"metric": tasks[n].metric_names[0], "student": scores(n)} for n in gold}
    report["student"] = {"run": str(run_dir), "best_epoch": best["epoch"], "average_all_tasks": best["average"],
                         "temperature": spec.temperature, "alpha": spec.alpha, "init": spec.init.model_dump()}
    return report


def render_report(report: dict, title: str) -> str:
    if report["tasks"]:
        return teachers.render_markdown(report, title)
    rows = [[f"{n} (gold only)", t["metric"], f"{t['student']['score']:.4f}"] for n, t in report["gold_tasks"].items()]
    return "\n".join([f"# {title}", "", *markdown_table(["task", "metric", "student"], rows)]) + "\n"


# -------------------------------------------------------------------------------------------------- command


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
    from ..errors import check_bools
    from ..modeling.model import load_tokenizer
    from ..tasks.data import check_files, check_max_length
    from ..training.flags import check_trainer_flags
    from ..training.pipeline import check_unfinished
    from ..training.resolve import config_is_global_zero

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
        if run and piece_targets.piece_tasks([tasks[n] for n in spec.distill]):
            source, _ = resolve_init(spec, spec_path, run, teacher_dir)
            piece_targets.check_before_build(load_tokenizer(source), source, run, [tasks[n] for n in spec.distill],
                                             spec_path, spec.train.max_length, teacher_spec.finetune.max_length)
        if run:  # the student's lengths fit its encoder, before any teacher is built
            source, _ = resolve_init(spec, spec_path, run, teacher_dir)
            tokenizer = load_tokenizer(source)
            for task in tasks.values():
                check_max_length(task, tokenizer, spec.train.max_length,
                                 f"{spec_path}: field 'train.max_length'" if spec.train.max_length else
                                 f"{spec.task_defs}: task '{task.name}': max_length")
            from transformers import AutoConfig

            from ..modeling.model import resolve_encoder
            from ..training.pipeline import check_positions

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
    from ..modeling.heads import resolve_pooling
    from ..modeling.model import load_encoder, load_tokenizer
    from ..tasks.data import tokenized_split
    from ..training import pipeline
    from ..training.runs import RUN_ENTRIES
    from ..training.resolve import datamodule_for

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
        teacher_report = teachers.summarize(teacher_dir, {n: tasks[n] for n in distill}, data_dir)
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
