"""Teacher ensembles and their cached outputs: ``python -m mtdnn.teachers TEACHERS_SPEC`` (MT-DNN-KD, stage 2a).

MT-DNN-KD (Liu et al. 2019, arXiv 1904.09482): for each task, an ensemble of models fine-tuned from the multi-task
model is the teacher, and its averaged class probabilities on the training set are the soft targets of one
multi-task student (:mod:`mtdnn.distill`). Here, for every task of a teacher spec (``teachers/*.yaml``):

1. each of M members is fine-tuned on that task alone from the multi-task run, as a normal training run
   (:func:`mtdnn.training.trainer.fit` of a :class:`~mtdnn.training.config.TrainConfig` with ``init_from`` the
   run; best epoch on dev, the selection rule of every model);
   members differ in seed and, optionally, dropout (``--dropout``: every dropout of encoder and head);
2. each member runs once in inference mode over the task's train and dev splits; its float32 logits (regression:
   predictions) are stored by example id as a ``datasets.Dataset`` with a fingerprint of the data, the tokenizer
   and the member's exported weights, written atomically and reused while the fingerprint holds;
3. the members' dev scores, the ensemble's dev score (averaged probabilities) and the members' pairwise
   disagreement go to ``teachers.json`` and ``teachers.md`` (:mod:`mtdnn.distillation.teacher_report`).

An interrupted build resumes: members with a complete run directory are not trained again, and cached outputs are
not recomputed. The teacher directory::

    teachers.yaml                     the resolved spec: multi-task run, tasks, members, settings (the student reads it)
    <task>/member-<k>/                a complete training run (config.yaml, checkpoints/, export/, metrics.json)
    <task>/member-<k>.json            what member k was built from (settings, multi-task run, data), checked on reuse
    <task>/logits/member-<k>-<split>/ datasets.Dataset: id (str), logits (float32, outputs) + fingerprint.json
    teachers.json, teachers.md        dev scores of members and ensemble, pairwise disagreement

Soft targets are not stored as probabilities: the student computes q = mean_m softmax(z_m / T) from the cached
logits, so the temperature T stays a student setting.

The modules of the build, by stage: :mod:`~mtdnn.distillation.multitask_run` (the run the members start from),
this module (the members), :mod:`~mtdnn.distillation.soft_targets` (their cached outputs, both shapes; the per-piece
shape in :mod:`~mtdnn.distillation.pieces`), :mod:`~mtdnn.distillation.teacher_report` (the report).
"""

from __future__ import annotations

import gc
import logging
import re
import shutil
from pathlib import Path

import torch

from . import soft_targets
from ..errors import CheckpointError, ConfigError
from ..fileio import (DirectoryLock, check_output_dir, claim_output_dir, read_json, remove_stale_temporaries,
                      write_atomic, write_json_atomic, write_yaml_atomic)
from ..modeling.model import load_tokenizer
from ..tasks.data import check_files
from ..tasks.tokenized import tokenizer_fingerprint
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from ..training import trainer as train
from ..training.config import TrainConfig
from ..training.runs import read_metrics
from .folds import FOLD_SPLIT, fold_task, fold_task_defs, fold_task_defs_path
from .multitask_run import multitask_export, pretrained_encoder, warn_if_limited
from .soft_targets import MANIFEST_FILE, member_dir
from .specs import TeacherSpec, finetune_record
from .teacher_report import SUMMARY_JSON, SUMMARY_MD, render_markdown, summarize

log = logging.getLogger("mtdnn.teachers")


def _teacher_entry(name: str) -> bool:
    """Whether the teacher build writes a file or directory of this name (its temporaries are removed on a rerun):
    the manifest and report, member records, cached outputs and fold task definitions."""
    return bool(re.fullmatch(r"teachers\.(yaml|json|md)|member-\d+\.json|member-\d+-(train|dev)|fold-\d+\.yaml",
                             name))


# ------------------------------------------------------------------------------------------------- the build

def _inference_device(accelerator: str) -> str:
    return "cuda" if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available() else "cpu"


def _first_difference(stored: dict, wanted: dict, prefix: str = "") -> str | None:
    for key in sorted(set(stored) | set(wanted)):
        a, b = stored.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _first_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"field '{prefix}{key}': built with {a!r}, now {b!r}"
    return None


def _same_record(sidecar: Path, settings: dict) -> bool:
    """Whether the member record ``sidecar`` (written when its training started) holds ``settings``."""
    try:
        stored = read_json(sidecar, CheckpointError, "member record") if sidecar.is_file() else None
    except CheckpointError:
        return False
    return isinstance(stored, dict) and _first_difference(stored, settings) is None


def teacher_tasks(spec: TeacherSpec, spec_path: str) -> dict[str, TaskDef]:
    """The spec's tasks from its task definitions (the counterpart of :func:`mtdnn.distill.student_tasks`).

    Raises:
        ConfigError: an unknown task, a task without a train or dev split (members are fine-tuned on train and
            selected on dev), or a per-piece task (token level) with ``cross_fit``.
    """
    tasks = select_tasks(load_task_defs(spec.task_defs), spec.tasks, f"{spec_path}: field 'tasks'")
    for name, task in tasks.items():
        missing = [s for s in ("train", "dev") if s not in task.splits]
        if missing:
            raise ConfigError(f"{spec_path}: field 'tasks': task '{name}' has no {' or '.join(missing)} split "
                              "(members are fine-tuned on train and selected on dev)")
        if task.kind.soft_targets is None:
            raise ConfigError(f"{spec_path}: field 'tasks': task '{name}' is a {task.type} task, which has no soft "
                              "targets to distil")
        if spec.cross_fit and task.kind.soft_target_pieces is not None:
            raise ConfigError(f"{spec_path}: field 'cross_fit': task '{name}' is a {task.type} task; out-of-fold "
                              "soft targets are built for sentence-level tasks only (their folds are stratified by "
                              "label); build its teachers in a spec without cross_fit")
    return tasks


def member_config(spec: TeacherSpec, task: str, member: dict, data_dir: Path, encoder: str, from_run: Path,
                  run_dir: Path, lightning: dict | None = None, task_defs: str | None = None) -> TrainConfig:
    """The :class:`~mtdnn.training.config.TrainConfig` of one member: fine-tune ``task`` alone from the multi-task
    run with the spec's ``finetune`` settings, what the member varies (``member``: see
    :attr:`~mtdnn.distillation.specs.TeacherSpec.member_settings`) and the Lightning settings. ``task_defs``:
    the fold's task definitions of a cross-fitted member (see :func:`fold_task`)."""
    finetune = spec.finetune.model_dump()
    if "export_hf" not in spec.finetune.model_fields_set:  # members serve the student: no Hugging Face folders
        finetune["export_hf"] = False
    for name in ("lr", "max_epochs"):
        if member.get(name) is not None:
            finetune[name] = member[name]
    return TrainConfig(task_defs=task_defs or spec.task_defs, tasks=[task], data_dir=str(data_dir), encoder=encoder,
                       init_from=str(from_run), output_dir=str(run_dir), seed=member["seed"],
                       data_seed=member.get("data_seed"), dropout=member.get("dropout"), **finetune, **(lightning or {}))


def enumerate_members(spec: TeacherSpec) -> list[tuple[int, int | None, dict]]:
    """``(k, fold, settings)`` of every member of a task: k = 1.. over folds (with ``cross_fit``: the members of
    fold 1 first, then fold 2, ...), fold None without ``cross_fit``, settings as in
    :attr:`~mtdnn.distillation.specs.TeacherSpec.member_settings`."""
    out = []
    for f_index, fold in enumerate(spec.folds):
        for m, member in enumerate(spec.member_settings, start=1):
            out.append((f_index * spec.members + m, fold, member))
    return out


def build(spec: TeacherSpec, spec_path: str, data_dir: Path, from_run: str | None = None,
          output_dir: str | None = None, lightning: dict | None = None, retrain_changed: bool = False) -> Path:
    """Build (or resume) the teacher ensembles of ``spec``; see the module docstring.

    Args:
        spec_path: names the spec in messages (its file).
        from_run: overrides ``spec.from_run``. output_dir: overrides ``spec.output_dir``.
        lightning: Lightning settings (:class:`~mtdnn.training.config.TrainConfig` fields: accelerator, devices,
            precision, ...) of the members' training runs.
        retrain_changed: retrain complete members whose settings, multi-task run or data changed (else an error).

    Returns:
        The teacher directory.

    Raises:
        ConfigError, DataError, CheckpointError: bad spec, data or multi-task run, or complete members built
            differently (without ``retrain_changed``); nothing is written before these checks pass.
        Interrupted: a member's training was interrupted (rerun to resume: complete members are kept).
    """
    # 1. Validate everything before writing anything.
    tasks = teacher_tasks(spec, spec_path)
    run = from_run or spec.from_run
    if not run:
        raise ConfigError(f"{spec_path}: field 'from_run': no multi-task run given (set it or pass --from-run)")
    run_path = Path(run).resolve()
    mt_export = multitask_export(run_path, f"{spec_path}: field 'from_run'" if not from_run else "--from-run")
    warn_if_limited(run_path, "the teachers start")
    encoder = pretrained_encoder(run_path)
    teacher_dir = Path(output_dir or spec.output_dir)
    if run_path.is_relative_to(teacher_dir.resolve()):
        raise ConfigError(f"{spec_path}: field 'from_run': {run} is inside the teacher directory {teacher_dir}")
    teacher_flag = "--teachers-dir" if output_dir else f"{spec_path}: field 'output_dir'"
    check_output_dir(teacher_dir, teacher_flag, "teachers", recognised=lambda d: (d / MANIFEST_FILE).is_file())
    for task in tasks.values():
        check_files(task, ["train", "dev"], data_dir)
    data = {n: {s: soft_targets.data_fingerprint(t, s, data_dir)["digest"] for s in ("train", "dev")}
            for n, t in tasks.items()}
    mt_digest = soft_targets.export_digest(mt_export)
    fold_tasks = {(n, f): fold_task(t, spec.cross_fit, f, spec.fold_seed)
                  for n, t in tasks.items() for f in spec.folds if f is not None}
    for (name, fold), ftask in fold_tasks.items():
        data[name][f"fold-{fold}"] = {s: soft_targets.data_fingerprint(ftask, s, data_dir)["digest"]
                                      for s in ("train", FOLD_SPLIT)}
    plan = []
    for name, task in tasks.items():
        for k, fold, member in enumerate_members(spec):
            settings = {"task": name, "member": k, **member, "fold": fold,
                        "cross_fit": {"k": spec.cross_fit, "seed": spec.fold_seed} if fold else None,
                        "from_run": str(run_path), "from_run_export": mt_digest,
                        "finetune": finetune_record(spec.finetune), "data": data[name]}
            run_dir = member_dir(teacher_dir, name, k)
            sidecar = run_dir.with_name(f"member-{k}.json")
            retrain = False
            if read_metrics(run_dir) is not None:
                stored = read_json(sidecar, CheckpointError, "member record") if sidecar.is_file() else {}
                if not isinstance(stored, dict):
                    raise CheckpointError(f"{sidecar}: damaged member record (not a JSON object)")
                # the multi-task run is compared by its export's digest, so that a moved directory still matches
                difference = _first_difference({key: v for key, v in stored.items() if key != "from_run"},
                                               {key: v for key, v in settings.items() if key != "from_run"})
                if difference and not retrain_changed:
                    raise CheckpointError(f"{sidecar}: teacher member {k} of task '{name}' is complete but was built "
                                          f"differently ({difference}); pass --retrain-changed to retrain it, or "
                                          "choose another teacher directory")
                retrain = bool(difference)
            plan.append((task, k, fold, member, settings, run_dir, sidecar, retrain))

    # 2. The resolved spec, then each member: train (unless complete), then cache its outputs.
    # One build per teacher directory at a time; what a killed build left (soft-target temporaries) is removed.
    lock = DirectoryLock(claim_output_dir(teacher_dir, "teachers"), teacher_flag)
    remove_stale_temporaries(teacher_dir, _teacher_entry, locked=True, recursive=True)
    try:
        manifest = {"spec": str(spec_path), "task_defs": str(Path(spec.task_defs).resolve()), "from_run": str(run_path),
                    "encoder": encoder, "data_dir": str(data_dir), "finetune": finetune_record(spec.finetune),
                    "cross_fit": {"k": spec.cross_fit, "seed": spec.fold_seed} if spec.cross_fit else None,
                    "tasks": {n: {"members": [{"member": k, **member, **({"fold": fold} if fold else {})}
                                              for k, fold, member in enumerate_members(spec)]}
                              for n in tasks}}
        write_yaml_atomic(teacher_dir / MANIFEST_FILE, manifest)
        for (name, fold), ftask in fold_tasks.items():
            write_yaml_atomic(fold_task_defs_path(teacher_dir, name, fold), fold_task_defs(ftask))
        device = _inference_device((lightning or {}).get("accelerator", "auto"))
        for task, k, fold, member, settings, run_dir, sidecar, retrain in plan:
            if read_metrics(run_dir) is None or retrain:
                # an interrupted member of the same settings is resumed from its last.ckpt; any other is retrained
                resume = not retrain and (run_dir / "checkpoints" / "last.ckpt").is_file() and \
                    _same_record(sidecar, settings)
                write_json_atomic(sidecar, settings)
                log.info("teacher %s member %d%s: %s from %s (%s)", task.name, k,
                         f" (fold {fold} of {spec.cross_fit} held out)" if fold else "",
                         "resuming the interrupted fine-tune" if resume else "fine-tuning", run_path,
                         ", ".join(f"{key} {v}" for key, v in member.items() if v is not None))
                defs = str(fold_task_defs_path(teacher_dir, task.name, fold)) if fold else None
                config = member_config(spec, task.name, member, data_dir, encoder, run_path, run_dir, lightning, defs)
                try:
                    try:
                        train.fit(config, resume=resume, overwrite=not resume)
                    except ConfigError as err:
                        if not resume:
                            raise
                        log.warning("teacher %s member %d: cannot resume (%s); fine-tuning it again", task.name, k,
                                    err)
                        train.fit(config, overwrite=True)
                finally:
                    gc.collect()  # the member's Trainer and model, before the next one is built
            else:
                log.info("teacher %s member %d: complete, reused (%s)", task.name, k, run_dir)
            export = run_dir / "export"
            member_fp = {"version": soft_targets.CACHE_VERSION, "member_export": soft_targets.export_digest(export),
                         "tokenizer": tokenizer_fingerprint(load_tokenizer(str(export / "encoder"))),
                         "max_length": spec.finetune.max_length}
            for split in ("train", "dev"):
                # a cross-fitted member's "train" outputs are those of its held-out fold (never rows it trained on)
                source = FOLD_SPLIT if fold and split == "train" else split
                digest = data[task.name][f"fold-{fold}"][FOLD_SPLIT] if source == FOLD_SPLIT else data[task.name][split]
                path = soft_targets.logits_dir(teacher_dir, task.name, k, split)
                wanted = {**member_fp, "data": digest}
                stored = soft_targets.read_fingerprint(path)
                if stored is not None and all(stored.get(key) == v for key, v in wanted.items()):
                    continue  # cached outputs of this member on this data: reused
                log.info("teacher %s member %d: outputs on %s", task.name, k, source)
                ids, outputs = soft_targets.member_outputs(export, task.name, source, data_dir,
                                                           spec.finetune.eval_batch_size, spec.finetune.max_length, device)
                soft_targets.write_outputs(path, ids, outputs, {**wanted, "task": task.name, "split": split, "member": k,
                                                                "fold": fold, "count": len(ids)})
            if not (lightning or {}).get("keep_last_checkpoint"):
                # a member is used through its export and cached outputs only; its checkpoints are most of its disk
                shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    finally:
        lock.release()

    # 3. Members' and ensemble's dev scores, disagreement.
    report = summarize(teacher_dir, tasks, data_dir)
    write_json_atomic(teacher_dir / SUMMARY_JSON, report)
    write_atomic(teacher_dir / SUMMARY_MD, render_markdown(report, f"Teachers: {teacher_dir}"))
    return teacher_dir
