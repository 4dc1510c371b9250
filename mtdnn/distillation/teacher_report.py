"""The teacher report (``teachers.json``, ``teachers.md``): each member's dev scores, the ensemble's, the members'
pairwise disagreement and what the soft targets carry (calibration, temperature scaling), per task and averaged.

Sentence-level types are scored from the cached outputs ``(n, members, outputs)`` of
:func:`mtdnn.distillation.soft_targets.teacher_outputs`; per-piece types (:mod:`mtdnn.distillation.pieces`) from
their soft-target distributions with a gold class (:func:`report_inputs`).
"""

from __future__ import annotations

import logging
import math
import statistics
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..modeling.losses import ensemble_prediction, ensemble_probabilities
from ..modeling.metrics import attach_split, average_score, build_metrics, compute_metrics, update_metrics
from ..modeling.model import load_tokenizer
from ..tables import markdown_table
from ..tasks.collate import collate
from ..tasks.data import load_split
from ..tasks.tokenized import tokenized_split
from ..tasks.taskdef import TaskDef
from ..tasks.types import TASK_TYPES
from ..training.runs import complete_run
from .batch_targets import PieceBatchTargets
from .calibration import TEMPERATURE_RANGE, classification_summary, regression_summary, temperature_scaling
from .pieces import MASKED
from .soft_targets import member_dir, member_fingerprints, read_manifest, teacher_outputs

log = logging.getLogger("mtdnn.teachers")

SUMMARY_JSON, SUMMARY_MD = "teachers.json", "teachers.md"


# --------------------------------------------------------------------------------------------------- scoring


def score(task: TaskDef, outputs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The task's dev metrics of ``outputs`` (logits or probabilities ``(n, classes)``, or scores ``(n,)``)."""
    metrics = build_metrics(task)
    update_metrics(metrics, task.type, outputs, labels, torch.ones(len(labels)))
    return compute_metrics(metrics)


def ensemble_outputs(task_type: str, outputs: torch.Tensor) -> torch.Tensor:
    """The ensemble of ``outputs`` ``(n, members, outputs)`` as the type's ``soft_targets`` says: averaged
    probabilities ``(n, classes)`` at T = 1, or the mean prediction ``(n,)`` (regression)."""
    if TASK_TYPES[task_type].soft_targets == "mean":
        return ensemble_prediction(outputs)
    return ensemble_probabilities(outputs)


def pairwise_disagreement(task_type: str, outputs: torch.Tensor) -> list[dict]:
    """For each pair of members, the fraction of examples whose predicted class differs (types whose soft
    targets are mean predictions, regression: the mean absolute difference of their predictions).
    ``outputs`` ``(n, members, outputs)``."""
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


def _split_outputs(teacher_dir: Path, task: TaskDef, split: str, data_dir: Path,
                   rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' cached outputs ``(n, members, outputs)`` on ``split`` (its first ``rows`` rows; None: all) and its
    gold labels ``(n,)``; for per-piece soft targets, their distributions with a gold class (labelled pieces;
    windows' start and end) as the n examples (:func:`report_inputs`)."""
    if task.kind.soft_target_pieces is not None:
        return report_inputs(teacher_dir, task, split, data_dir, rows=rows)[:2]

    raw = load_split(task, split, data_dir)
    examples = raw.examples[:rows] if rows else raw.examples
    ids = [ex.id for ex in examples]
    outputs = torch.from_numpy(teacher_outputs(teacher_dir, task, split, data_dir, ids))
    labels = torch.tensor([ex.label for ex in examples])  # int64 ids, or float32 scores
    return outputs, labels


def soft_target_summary(task_type: str, outputs: torch.Tensor, labels: torch.Tensor) -> dict:
    """What the ensemble's soft targets carry on one split (see :mod:`mtdnn.distillation.calibration`):
    ``outputs`` ``(n, members, classes)`` logits, or ``(n, members, 1)`` predictions of a type whose soft targets
    are mean predictions (regression)."""
    if TASK_TYPES[task_type].soft_targets == "mean":
        return regression_summary(outputs, labels)
    return classification_summary(outputs, labels)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(teacher_dir: Path, tasks: dict[str, TaskDef], data_dir: Path, rows: int | None = None) -> dict:
    """Per task: each member's dev scores, their mean and sample standard deviation, the ensemble's dev scores
    (probabilities averaged over members) and the pairwise disagreement; and the same averaged over tasks (each
    task's first metric).

    Every score is computed from the members' cached dev outputs (of their best checkpoints) on the same rows: the
    whole dev split, or its first ``rows`` rows (the rows a student trained with ``limit_eval_examples`` is scored
    on), recorded per task as ``dev_rows``. A member's own run may have scored fewer rows
    (``limit_eval_examples``); its ``metrics.json`` score is kept as ``run_score`` but compared with nothing.

    Raises:
        CheckpointError: a member run is incomplete or its cached dev outputs are missing or stale.
    """
    manifest = read_manifest(teacher_dir)
    report: dict[str, Any] = {"teachers": str(teacher_dir), "from_run": manifest["from_run"], "tasks": {}}
    per_member: dict[int, dict] = {}
    ensemble_scores: dict[str, dict] = {}
    for name, task in tasks.items():
        metric = task.metric_names[0]
        carried = {}
        for split in ("train", "dev"):
            split_outputs, split_labels = _split_outputs(teacher_dir, task, split, data_dir,
                                                         rows if split == "dev" else None)
            carried[split] = soft_target_summary(task.type, split_outputs, split_labels)
        outputs, labels = split_outputs, split_labels  # dev
        if task.kind.soft_targets == "probabilities":
            carried["temperature_scaling"] = {"split": "dev", **temperature_scaling(outputs, labels, seed=0)}
        if task.kind.soft_target_pieces is None:
            ensemble = score(task, ensemble_outputs(task.type, outputs), labels)
            member_scores = [score(task, ensemble_outputs(task.type, outputs[:, j:j + 1]), labels)
                             for j in range(outputs.shape[1])]  # an ensemble of one: the member's own outputs
            dev_rows = len(labels)
        else:  # the task's own metrics (entity F1, SQuAD EM/F1) of the averaged per-piece probabilities
            _, _, ensemble, member_scores, dev_rows = report_inputs(teacher_dir, task, "dev", data_dir, rows=rows,
                                                                    per_member=True)
        members = []
        for j, member in enumerate(manifest["tasks"][name]["members"]):
            k = member["member"]
            run = complete_run(member_dir(teacher_dir, name, k))["best"]["tasks"][name]
            dev = member_scores[j]  # on the ensemble's rows
            members.append({**member, "dev": dev, "score": dev[metric], "run_score": run[metric]})
            per_member.setdefault(k, {})[name] = dev
        ensemble_scores[name] = ensemble
        mean, std = _mean_std([m["score"] for m in members])
        pairs = pairwise_disagreement(task.type, outputs)
        if pairs and all(p["value"] == 0 for p in pairs):
            log.warning("task '%s': the %d members make identical dev predictions; vary their seeds or dropout",
                        name, len(members))
        measure = ("mean absolute difference of predictions" if task.kind.soft_targets == "mean"
                   else "fraction of examples with a different predicted class"
                   if task.kind.soft_target_pieces is None
                   else "fraction of soft-target distributions (labelled pieces; window starts and ends) with a "
                        "different predicted class")
        folds = sorted({m["fold"] for m in members if m.get("fold")})
        per_fold = []
        for fold in folds if task.kind.soft_target_pieces is None else []:  # no per-piece cross-fit
            columns = [j for j, m in enumerate(members) if m.get("fold") == fold]
            fold_scores = score(task, ensemble_outputs(task.type, outputs[:, columns]), labels)
            per_fold.append({"fold": fold, "members": [members[j]["member"] for j in columns],
                             "ensemble": fold_scores, "score": fold_scores[metric]})
        report["tasks"][name] = {"metric": metric, "dev_rows": dev_rows, "members": members, "mean": mean, "std": std,
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
    """``teachers.md``: the Markdown tables of a :func:`summarize` report (with a ``student`` column when the report
    has one, as the student's ``report.md``): dev scores, pairwise disagreement, out-of-fold ensembles and what the
    soft targets carry."""
    tasks = report["tasks"]
    members = max(len(t["members"]) for t in tasks.values())
    has_student = "student" in report["average"]
    head = (["task", "metric", "dev rows"] + [f"member {k}" for k in range(1, members + 1)]
            + ["mean ± sd", "ensemble"] + (["student"] if has_student else []))
    fmt = lambda v: "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"  # noqa: E731
    rows = []
    for name, t in tasks.items():
        row = [name, t["metric"], str(t.get("dev_rows", ""))] + [fmt(m["score"]) for m in t["members"]]
        row += [""] * (members - len(t["members"]))
        row += [f"{fmt(t['mean'])} ± {fmt(t['std'])}", fmt(t["ensemble"]["score"])]
        rows.append(row + ([fmt(t["student"]["score"])] if has_student else []))
    avg = report["average"]
    row = ["**average**", "", ""] + [fmt(v) for v in avg["members"]] + [f"{fmt(avg['mean'])} ± {fmt(avg['std'])}",
                                                                         fmt(avg["ensemble"])]
    rows.append(row + ([fmt(avg["student"])] if has_student else []))
    rows += [[f"{name} (gold only)", t["metric"], ""] + [""] * (members + 2) + [fmt(t["student"]["score"])]
             for name, t in report.get("gold_tasks", {}).items()]
    lines = [f"# {title}", "", "Dev scores (each task's first metric; the average is over tasks), every score of a "
             "row on the same dev rows (the dev rows column; the student's are its run's, limit_eval_examples "
             "included). Members: each member's best checkpoint; ensemble: class probabilities (regression: "
             "predictions) averaged over members; sd: sample standard deviation over members.", ""]
    lines += markdown_table(head, rows)
    lines += ["", "Pairwise disagreement of the members on dev (classification: fraction of examples with a "
              "different predicted class; regression: mean absolute difference of the predictions; token-level "
              "tasks: fraction of labelled pieces and of window starts and ends with a different predicted class).",
              ""]
    pairs = [f"{a}-{b}" for a in range(1, members + 1) for b in range(a + 1, members + 1)]
    rows = []
    for name, t in tasks.items():
        values = {f"{p['members'][0]}-{p['members'][1]}": fmt(p["value"]) for p in t["disagreement"]["pairs"]}
        rows.append([name] + [values.get(p, "") for p in pairs])
    lines += markdown_table(["task"] + pairs, rows)
    lines += ["", "Ensemble gain over the mean member (dev): " + ", ".join(
        f"{name} {t['ensemble_gain']:+.4f}" for name, t in tasks.items() if "ensemble_gain" in t) + "."]
    folded = {name: t for name, t in tasks.items() if t.get("folds")}
    if folded:
        folds = [f"fold {f['fold']}" for f in next(iter(folded.values()))["folds"]]
        lines += ["", "Out-of-fold teachers: each fold's ensemble (its members trained without that fold) on dev, "
                  "and their mean.", ""]
        lines += markdown_table(["task"] + folds + ["mean"], [[name] + [fmt(f["score"]) for f in t["folds"]]
                                                              + [fmt(t["fold_mean"])] for name, t in folded.items()])
    lines += soft_target_markdown(tasks, fmt)
    return "\n".join(lines) + "\n"


def soft_target_markdown(tasks: dict, fmt) -> list[str]:
    """The report's "what the soft targets carry" tables (train against dev), when the report has them."""
    carried_by_task = [(name, t["soft_targets"]) for name, t in tasks.items() if "soft_targets" in t]
    if not carried_by_task:
        return []
    rows, regression = [], []
    for name, carried in carried_by_task:
        for split in ("train", "dev"):
            c = carried.get(split)
            if c is None:
                continue
            if "mean_member_spread" in c:
                regression.append([name, split, str(c["examples"]), fmt(c["mean_member_spread"]),
                                   fmt(c["mean_absolute_error"]), fmt(c["spread_error_correlation"])])
                continue
            rows.append([name, split, str(c["examples"]), fmt(c["mean_max_probability"]), fmt(c["mean_entropy"]),
                         fmt(c["agreement_with_gold"]), fmt(c["ece"]), ", ".join(fmt(v) for v in c["member_ece"])])
    lines = ["", "What the soft targets carry (q: the ensemble's averaged probabilities at T = 1). Max prob and "
             "entropy (nats): means over examples; agreement: argmax q = gold; ECE: expected calibration error, "
             "15 equal-width bins on the maximum probability (Guo et al. 2017), of the ensemble and of each member. "
             "Train is the set the members were fine-tuned on.", ""]
    lines += markdown_table(["task", "split", "examples", "max prob", "entropy", "agreement", "ECE ensemble",
                             "ECE members"], rows)
    if regression:
        lines += ["", "Regression: the members' spread (per-example sd of their predictions, averaged) against the "
                  "ensemble's absolute error, and their correlation over examples.", ""]
        lines += markdown_table(["task", "split", "examples", "member spread", "ensemble abs error", "correlation"],
                                regression)
    scaled = [(name, c["temperature_scaling"]) for name, c in carried_by_task if "temperature_scaling" in c]
    if scaled:
        lines += ["", "Temperature scaling of the ensemble: T fitted by NLL on one seeded half of dev (a grid over "
                  f"[{TEMPERATURE_RANGE[0]:g}, {TEMPERATURE_RANGE[1]:g}]), ECE and NLL reported on the other half. A T "
                  "at an end of the grid is no fitted minimum (flagged), and an ECE that scaling made worse is "
                  "flagged too.", ""]
        lines += markdown_table(["task", "fit / report rows", "T", "ECE at T = 1", "ECE at T", "NLL at T = 1",
                                 "NLL at T"],
                                [[n, f"{c['fit_examples']} / {c['report_examples']}",
                                  fmt(c["temperature"]) + (" (search bound)" if c.get("at_bound") else ""),
                                  fmt(c["before"]["ece"]),
                                  fmt(c["after"]["ece"]) + (" (worse than at T = 1)" if c.get("ece_worse") else ""),
                                  fmt(c["before"]["nll"]), fmt(c["after"]["nll"])] for n, c in scaled])
    return lines


# --------------------------------------------------------------------------------- per-piece soft targets


def ensemble_log_probabilities(teacher_logits: torch.Tensor, over: str, real: torch.Tensor) -> torch.Tensor:
    """``log q``, q = (1/M) sum_m softmax(z_m) (MT-DNN-KD's ensemble, at T = 1): ``(batch, members, seq_len, width)``
    -> ``(batch, seq_len, width)``, the softmax over the classes (``over="classes"``) or over the pieces
    (``"pieces"``); padding positions (``real`` ``(batch, seq_len)`` False) hold :data:`MASKED`."""
    q = torch.softmax(teacher_logits.float(), dim=-1 if over == "classes" else -2).mean(dim=1)
    return torch.log(q.clamp(min=1e-30)).masked_fill(~real.unsqueeze(-1), MASKED)


def report_inputs(teacher_dir: Path, task: TaskDef, split_name: str, data_dir: Path, batch_size: int = 64,
                  rows: int | None = None, per_member: bool = False) -> tuple:
    """What the teacher report reads from per-piece soft targets on one split.

    The *units* are the soft-target distributions with a gold class: each labelled piece's tag distribution
    (``over="classes"``), or each window's start and end distributions over its pieces, padded with
    :data:`MASKED` (``"pieces"``); the report's calibration, temperature scaling and disagreement treat them as
    classification examples. The ensemble's scores are the task's own metrics (entity F1, SQuAD EM/F1) of
    ``log q`` (:func:`ensemble_log_probabilities`).

    Args:
        rows: score the tokenized split's first ``rows`` rows (sentences; QA windows), as a student trained with
            ``limit_eval_examples`` is scored (None: all).
        per_member: also each member's scores alone, and the number of rows scored.

    Returns:
        ``(units (u, members, classes) logits, gold (u,) int64, ensemble scores {metric: value})``; with
        ``per_member`` also ``[member scores {metric: value}]`` and the rows scored.

    Raises:
        CheckpointError: see :func:`mtdnn.distillation.soft_targets.teacher_outputs`.
    """
    members = member_fingerprints(teacher_dir, task)
    if not members:
        raise CheckpointError(f"{Path(teacher_dir) / task.name / 'logits'}: no cached teacher outputs of task "
                              f"'{task.name}'; build them with python -m mtdnn.teachers")
    export, fingerprint = next(iter(members.items()))
    tokenizer = load_tokenizer(export)  # the members' tokenizer, and their max_length: their pieces
    split = tokenized_split(task, split_name, data_dir, tokenizer, fingerprint.get("max_length"))
    if rows:
        split = split.head(rows)
    cached = PieceBatchTargets([torch.from_numpy(r) for r in
                                teacher_outputs(teacher_dir, task, split_name, data_dir, split.ids, rows=split)])
    mask = PieceBatchTargets([torch.tensor(m, dtype=torch.float32).view(1, -1, 1)
                              for m in task.kind.soft_target_pieces.mask(split)])
    over = task.kind.soft_target_pieces.over
    metrics = attach_split(build_metrics(task), split)
    alone: list = []  # per member, once the first batch says how many there are
    units, gold = [], []
    for start in range(0, len(split), batch_size):
        batch = collate([split[i] for i in range(start, min(start + batch_size, len(split)))], task,
                        tokenizer.pad_token_id or 0, padding_side=split.padding_side)
        z, real = cached.for_batch(batch), batch.attention_mask.bool()
        update_metrics(metrics, task.type, ensemble_log_probabilities(z, over, real), batch.labels, batch.weight)
        if per_member and not alone:
            alone = [attach_split(build_metrics(task), split) for _ in range(z.shape[1])]
        for j, member_metrics in enumerate(alone):
            update_metrics(member_metrics, task.type, ensemble_log_probabilities(z[:, j:j + 1], over, real),
                           batch.labels, batch.weight)
        if over == "classes":
            keep = (mask.for_batch(batch)[:, 0, :, 0] == 1) & (batch.labels >= 0)
            units.append(z.transpose(1, 2)[keep])  # (pieces, members, classes)
            gold.append(batch.labels[keep])
        else:
            units += [z[..., c] for c in range(z.shape[-1])]  # (windows, members, seq_len) per column
            gold += [batch.labels[:, c] for c in range(z.shape[-1])]
    if over == "pieces":
        longest = max(u.shape[-1] for u in units)
        units = [torch.nn.functional.pad(u, (0, longest - u.shape[-1]), value=MASKED) for u in units]
    if per_member:
        return (torch.cat(units), torch.cat(gold), compute_metrics(metrics), [compute_metrics(m) for m in alone],
                len(split))
    return torch.cat(units), torch.cat(gold), compute_metrics(metrics)
