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
   disagreement go to ``teachers.json`` and ``teachers.md``.

An interrupted build resumes: members with a complete run directory are not trained again, and cached outputs are
not recomputed. The teacher directory::

    teachers.yaml                     the resolved spec: multi-task run, tasks, members, settings (the student reads it)
    <task>/member-<k>/                a complete training run (config.yaml, checkpoints/, export/, metrics.json)
    <task>/member-<k>.json            what member k was built from (settings, multi-task run, data), checked on reuse
    <task>/logits/member-<k>-<split>/ datasets.Dataset: id (str), logits (float32, outputs) + fingerprint.json
    teachers.json, teachers.md        dev scores of members and ensemble, pairwise disagreement

Soft targets are not stored as probabilities: the student computes q = mean_m softmax(z_m / T) from the cached
logits, so the temperature T stays a student setting.
"""

from __future__ import annotations

import gc
import logging
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import torch

from . import piece_targets, soft_targets
from ..errors import CheckpointError, ConfigError
from ..fileio import (DirectoryLock, check_output_dir, claim_output_dir, read_json, remove_stale_temporaries,
                      write_atomic, write_json_atomic, write_yaml_atomic)
from .calibration import classification_summary, regression_summary, temperature_scaling
from .folds import FOLD_SPLIT, fold_task, fold_task_defs, fold_task_defs_path
from .soft_targets import MANIFEST_FILE, member_dir, read_manifest
from .specs import TeacherSpec
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from ..training.config import TrainConfig

log = logging.getLogger("mtdnn.teachers")

SUMMARY_JSON, SUMMARY_MD = "teachers.json", "teachers.md"


def _teacher_entry(name: str) -> bool:
    """Whether the teacher build writes a file or directory of this name (its temporaries are removed on a rerun):
    the manifest and report, member records, cached outputs and fold task definitions."""
    import re

    return bool(re.fullmatch(r"teachers\.(yaml|json|md)|member-\d+\.json|member-\d+-(train|dev)|fold-\d+\.yaml",
                             name))


# --------------------------------------------------------------------------------------------------- scoring


def score(task: TaskDef, outputs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The task's dev metrics of ``outputs`` (logits or probabilities ``(n, classes)``, or scores ``(n,)``)."""
    from ..modeling.metrics import build_metrics, compute_metrics, update_metrics

    metrics = build_metrics(task)
    update_metrics(metrics, task.type, outputs, labels, torch.ones(len(labels)))
    return compute_metrics(metrics)


def ensemble_outputs(task_type: str, outputs: torch.Tensor) -> torch.Tensor:
    """The ensemble of ``outputs`` ``(n, members, outputs)`` as the type's ``soft_targets`` says: averaged
    probabilities ``(n, classes)`` at T = 1, or the mean prediction ``(n,)`` (regression)."""
    from ..modeling.losses import ensemble_prediction, ensemble_probabilities
    from ..tasks.types import TASK_TYPES

    if TASK_TYPES[task_type].soft_targets == "mean":
        return ensemble_prediction(outputs)
    return ensemble_probabilities(outputs)


def pairwise_disagreement(task_type: str, outputs: torch.Tensor) -> list[dict]:
    """For each pair of members, the fraction of examples whose predicted class differs (types whose soft
    targets are mean predictions, regression: the mean absolute difference of their predictions).
    ``outputs`` ``(n, members, outputs)``."""
    from ..tasks.types import TASK_TYPES

    mean_predictions = TASK_TYPES[task_type].soft_targets == "mean"
    members = outputs.shape[1]
    pairs = []
    for i in range(members):
        for j in range(i + 1, members):
            if mean_predictions:
                value = (outputs[:, i, 0] - outputs[:, j, 0]).abs().mean()
            else:
                value = (outputs[:, i].argmax(-1) != outputs[:, j].argmax(-1)).float().mean()
            pairs.append({"members": [i + 1, j + 1], "value": float(value)})
    return pairs


def _split_outputs(teacher_dir: Path, task: TaskDef, split: str, data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' cached outputs ``(n, members, outputs)`` on ``split`` and its gold labels ``(n,)``; for per-piece
    soft targets, their distributions with a gold class (labelled pieces; windows' start and end) as the n examples
    (:func:`mtdnn.distillation.piece_targets.report_inputs`)."""
    from ..tasks.data import load_split

    if task.task_type.soft_target_pieces is not None:
        return piece_targets.report_inputs(teacher_dir, task, split, data_dir)[:2]

    raw = load_split(task, split, data_dir)
    ids = [ex.id for ex in raw.examples]
    outputs = torch.from_numpy(soft_targets.teacher_outputs(teacher_dir, task, split, data_dir, ids))
    labels = torch.tensor([ex.label for ex in raw.examples])  # int64 ids, or float32 scores
    return outputs, labels


def soft_target_summary(task_type: str, outputs: torch.Tensor, labels: torch.Tensor) -> dict:
    """What the ensemble's soft targets carry on one split (see :mod:`mtdnn.distillation.calibration`):
    ``outputs`` ``(n, members, classes)`` logits, or ``(n, members, 1)`` predictions of a type whose soft targets
    are mean predictions (regression)."""
    from ..tasks.types import TASK_TYPES

    if TASK_TYPES[task_type].soft_targets == "mean":
        return regression_summary(outputs, labels)
    return classification_summary(outputs, labels)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(teacher_dir: Path, tasks: dict[str, TaskDef], data_dir: Path) -> dict:
    """Per task: each member's dev scores (its run's ``metrics.json``, best epoch), their mean and sample standard
    deviation, the ensemble's dev scores (probabilities averaged over members) and the pairwise disagreement;
    and the same averaged over tasks (each task's first metric).

    Raises:
        CheckpointError: a member run is incomplete or its cached dev outputs are missing or stale.
    """
    from ..modeling.metrics import average_score
    from ..training.runs import complete_run

    manifest = read_manifest(teacher_dir)
    report: dict[str, Any] = {"teachers": str(teacher_dir), "from_run": manifest["from_run"], "tasks": {}}
    per_member: dict[int, dict] = {}
    ensemble_scores: dict[str, dict] = {}
    for name, task in tasks.items():
        metric = task.metric_names[0]
        members = []
        for member in manifest["tasks"][name]["members"]:
            k = member["member"]
            dev = complete_run(member_dir(teacher_dir, name, k))["best"]["tasks"][name]
            members.append({**member, "dev": dev, "score": dev[metric]})
            per_member.setdefault(k, {})[name] = dev
        carried = {}
        for split in ("train", "dev"):
            split_outputs, split_labels = _split_outputs(teacher_dir, task, split, data_dir)
            carried[split] = soft_target_summary(task.type, split_outputs, split_labels)
        outputs, labels = split_outputs, split_labels  # dev
        if task.task_type.soft_targets == "probabilities":
            carried["temperature_scaling"] = {"split": "dev", **temperature_scaling(outputs, labels, seed=0)}
        if task.task_type.soft_target_pieces is None:
            ensemble = score(task, ensemble_outputs(task.type, outputs), labels)
        else:  # the task's own metrics (entity F1, SQuAD EM/F1) of the averaged per-piece probabilities
            ensemble = piece_targets.report_inputs(teacher_dir, task, "dev", data_dir)[2]
        ensemble_scores[name] = ensemble
        mean, std = _mean_std([m["score"] for m in members])
        pairs = pairwise_disagreement(task.type, outputs)
        if pairs and all(p["value"] == 0 for p in pairs):
            log.warning("task '%s': the %d members make identical dev predictions; vary their seeds or dropout",
                        name, len(members))
        measure = ("mean absolute difference of predictions" if task.task_type.soft_targets == "mean"
                   else "fraction of examples with a different predicted class"
                   if task.task_type.soft_target_pieces is None
                   else "fraction of soft-target distributions (labelled pieces; window starts and ends) with a "
                        "different predicted class")
        folds = sorted({m["fold"] for m in members if m.get("fold")})
        per_fold = []
        for fold in folds if task.task_type.soft_target_pieces is None else []:  # no per-piece cross-fit
            columns = [j for j, m in enumerate(members) if m.get("fold") == fold]
            fold_scores = score(task, ensemble_outputs(task.type, outputs[:, columns]), labels)
            per_fold.append({"fold": fold, "members": [members[j]["member"] for j in columns],
                             "ensemble": fold_scores, "score": fold_scores[metric]})
        report["tasks"][name] = {"metric": metric, "members": members, "mean": mean, "std": std,
                                 "ensemble": {"dev": ensemble, "score": ensemble[metric]},
                                 "ensemble_gain": ensemble[metric] - mean,
                                 **({"folds": per_fold, "fold_mean": statistics.fmean(f["score"] for f in per_fold)}
                                    if per_fold else {}),
                                 "disagreement": {"measure": measure, "pairs": pairs},
                                 "soft_targets": carried}
    names = {n: t.metric_names for n, t in tasks.items()}
    member_averages = [average_score(scores, names) for _, scores in sorted(per_member.items())]
    mean, std = _mean_std(member_averages)
    report["average"] = {"members": member_averages, "mean": mean, "std": std,
                         "ensemble": average_score(ensemble_scores, names)}
    return report


def render_markdown(report: dict, title: str) -> str:
    """A Markdown table of a :func:`summarize` report (with a ``student`` column when the report has one)."""
    tasks = report["tasks"]
    members = max(len(t["members"]) for t in tasks.values())
    has_student = "student" in report["average"]
    head = (["task", "metric"] + [f"member {k}" for k in range(1, members + 1)] + ["mean ± sd", "ensemble"]
            + (["student"] if has_student else []))
    lines = [f"# {title}", "", "Dev scores (each task's first metric; the average is over tasks). Members: best "
             "epoch of each member's run; ensemble: class probabilities (regression: predictions) averaged over "
             "members; sd: sample standard deviation over members.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v: "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"  # noqa: E731
    for name, t in tasks.items():
        row = [name, t["metric"]] + [fmt(m["score"]) for m in t["members"]] + [""] * (members - len(t["members"]))
        row += [f"{fmt(t['mean'])} ± {fmt(t['std'])}", fmt(t["ensemble"]["score"])]
        row += [fmt(t["student"]["score"])] if has_student else []
        lines.append("| " + " | ".join(row) + " |")
    avg = report["average"]
    row = ["**average**", ""] + [fmt(v) for v in avg["members"]] + [f"{fmt(avg['mean'])} ± {fmt(avg['std'])}",
                                                                     fmt(avg["ensemble"])]
    row += [fmt(avg["student"])] if has_student else []
    lines.append("| " + " | ".join(row) + " |")
    for name, t in report.get("gold_tasks", {}).items():
        lines.append("| " + " | ".join([f"{name} (gold only)", t["metric"]] + [""] * (members + 2)
                                       + [fmt(t["student"]["score"])]) + " |")
    lines += ["", "Pairwise disagreement of the members on dev (classification: fraction of examples with a "
              "different predicted class; regression: mean absolute difference of the predictions; token-level "
              "tasks: fraction of labelled pieces and of window starts and ends with a different predicted class).",
              ""]
    pairs = [f"{a}-{b}" for a in range(1, members + 1) for b in range(a + 1, members + 1)]
    lines += ["| task | " + " | ".join(pairs) + " |", "|" + "---|" * (len(pairs) + 1)]
    for name, t in tasks.items():
        values = {f"{p['members'][0]}-{p['members'][1]}": fmt(p["value"]) for p in t["disagreement"]["pairs"]}
        lines.append(f"| {name} | " + " | ".join(values.get(p, "") for p in pairs) + " |")
    lines += ["", "Ensemble gain over the mean member (dev): " + ", ".join(
        f"{name} {t['ensemble_gain']:+.4f}" for name, t in tasks.items() if "ensemble_gain" in t) + "."]
    folded = {name: t for name, t in tasks.items() if t.get("folds")}
    if folded:
        lines += ["", "Out-of-fold teachers: each fold's ensemble (its members trained without that fold) on dev, "
                  "and their mean.", "", "| task | " + " | ".join(f"fold {f['fold']}" for f in
                                                                     next(iter(folded.values()))["folds"])
                  + " | mean |", "|---|" + "---|" * (len(next(iter(folded.values()))["folds"]) + 1)]
        lines += [f"| {name} | " + " | ".join(fmt(f["score"]) for f in t["folds"]) + f" | {fmt(t['fold_mean'])} |"
                  for name, t in folded.items()]
    lines += soft_target_markdown(tasks, fmt)
    return "\n".join(lines) + "\n"


def soft_target_markdown(tasks: dict, fmt) -> list[str]:
    """The report's "what the soft targets carry" tables (train against dev), when the report has them."""
    rows = [(name, t["soft_targets"]) for name, t in tasks.items() if "soft_targets" in t]
    if not rows:
        return []
    lines = ["", "What the soft targets carry (q: the ensemble's averaged probabilities at T = 1). Max prob and "
             "entropy (nats): means over examples; agreement: argmax q = gold; ECE: expected calibration error, "
             "15 equal-width bins on the maximum probability (Guo et al. 2017), of the ensemble and of each member. "
             "Train is the set the members were fine-tuned on.", "",
             "| task | split | examples | max prob | entropy | agreement | ECE ensemble | ECE members |",
             "|---|---|---|---|---|---|---|---|"]
    regression = []
    for name, carried in rows:
        for split in ("train", "dev"):
            c = carried.get(split)
            if c is None:
                continue
            if "mean_member_spread" in c:
                regression.append((name, split, c))
                continue
            members = ", ".join(fmt(v) for v in c["member_ece"])
            lines.append(f"| {name} | {split} | {c['examples']} | {fmt(c['mean_max_probability'])} | "
                         f"{fmt(c['mean_entropy'])} | {fmt(c['agreement_with_gold'])} | {fmt(c['ece'])} | {members} |")
    if regression:
        lines += ["", "Regression: the members' spread (per-example sd of their predictions, averaged) against the "
                  "ensemble's absolute error, and their correlation over examples.", "",
                  "| task | split | examples | member spread | ensemble abs error | correlation |", "|---|---|---|---|---|---|"]
        lines += [f"| {n} | {sp} | {c['examples']} | {fmt(c['mean_member_spread'])} | {fmt(c['mean_absolute_error'])} "
                  f"| {fmt(c['spread_error_correlation'])} |" for n, sp, c in regression]
    scaled = [(name, c["temperature_scaling"]) for name, c in rows if "temperature_scaling" in c]
    if scaled:
        lines += ["", "Temperature scaling of the ensemble: T fitted by NLL on one seeded half of dev, ECE and NLL "
                  "reported on the other half.", "",
                  "| task | T | ECE at T = 1 | ECE at T | NLL at T = 1 | NLL at T |", "|---|---|---|---|---|---|"]
        lines += [f"| {n} | {fmt(c['temperature'])} | {fmt(c['before']['ece'])} | {fmt(c['after']['ece'])} | "
                  f"{fmt(c['before']['nll'])} | {fmt(c['after']['nll'])} |" for n, c in scaled]
    return lines


# ------------------------------------------------------------------------------------------------- the build

def multitask_export(run: str | Path, where: str) -> Path:
    """The export of a complete multi-task run (or an export directory itself).

    Raises:
        CheckpointError: prefixed with ``where`` (the spec file and field): no such run, an unfinished run, or
            no export.
    """
    from ..training.export import is_export_dir, resolve_export
    from ..training.runs import complete_run

    try:
        if not is_export_dir(run):
            complete_run(run)  # says whether the run is missing or unfinished
        return resolve_export(run)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from None


def warn_if_limited(run: str | Path, who: str) -> dict[str, int]:
    """Say (a warning) when ``run`` is a limited run (``--limit-train-examples``/``--limit-eval-examples``), which a
    teacher build or student should rarely start from; return its limits."""
    from ..training.trainer import run_limits

    limits = run_limits(run)
    if limits:
        shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in limits.items())
        log.warning("%s from %s, a LIMITED run (%s): its model saw part of the data; train a full run for results",
                    who, run, shown)
    return limits


def pretrained_encoder(run: Path) -> str:
    """The encoder a training run started from (its ``config.yaml``), else its export's source encoder."""
    from ..training.export import EXPORT_META, resolve_export
    from ..training.runs import CONFIG_FILE, read_run_config

    if (Path(run) / CONFIG_FILE).is_file():
        encoder = read_run_config(run)[1].get("encoder")
        if encoder:
            return str(encoder)
    meta_path = resolve_export(run) / EXPORT_META
    meta = read_json(meta_path, CheckpointError, "export metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("source_encoder"), str):
        raise CheckpointError(f"{meta_path}: no 'source_encoder' (the export is damaged)")
    return meta["source_encoder"]


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
        if task.task_type.soft_targets is None:
            raise ConfigError(f"{spec_path}: field 'tasks': task '{name}' is a {task.type} task, which has no soft "
                              "targets to distil")
        if spec.cross_fit and task.task_type.soft_target_pieces is not None:
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
    from ..training import trainer as train
    from ..tasks.data import check_files, tokenizer_fingerprint
    from ..modeling.model import load_tokenizer
    from ..training.runs import read_metrics

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
                        "finetune": spec.finetune.model_dump(), "data": data[name]}
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
                    "encoder": encoder, "data_dir": str(data_dir), "finetune": spec.finetune.model_dump(),
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
