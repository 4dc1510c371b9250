"""The paired comparison of MT-DNN-KD's claim: a student trained on soft targets against the same student trained on
gold labels only, seed for seed (``python -m mtdnn.distill TEACHERS STUDENT --seeds 5 --baseline gold-only``).

Both arms start from the same multi-task run's best checkpoint and run the same optimizer steps with the same
seeds (schedule, data order, dropout masks); the only difference is alpha (the spec's for the distilled arm, 0 for
the gold-only one). The analysis is fixed in advance (:mod:`mtdnn.distillation.paired`): per task and for the
average over tasks (each task's first metric), each arm's mean +- sd over seeds, the paired t-interval (95%) of
the per-seed differences, and a paired bootstrap over dev examples (10,000 resamples, seeded); the teachers'
members' mean and the ensemble beside them.

Every number is recomputed from the runs' per-example dev predictions (their exports, run once over dev), so the
bootstrap and the per-seed scores come from the same predictions.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..fileio import check_output_dir, claim_output_dir, write_atomic, write_json_atomic
from ..tables import markdown_table
from ..tasks.data import load_split
from ..tasks.types import TASK_TYPES
from ..training.resume import RESUME_MAY_DIFFER
from ..training.runs import config_differences, continue_unfinished, read_metrics, read_run_config
from . import student
from .paired import BOOTSTRAP_RESAMPLES, RESAMPLED_METRICS, paired_bootstrap, resampled_metric, t_interval
from .soft_targets import member_outputs
from .student import student_config
from .teacher_report import summarize

DISTILLED, GOLD_ONLY = "distilled", "gold-only"


def predictions_of(task_type: str, outputs: np.ndarray) -> np.ndarray:
    """Per-example predictions from model outputs ``(n, outputs)``: class (or candidate) ids, or scores (types
    whose soft targets are mean predictions, regression)."""
    outputs = np.asarray(outputs)
    if TASK_TYPES[task_type].soft_targets == "mean":
        return outputs.reshape(len(outputs))
    return outputs.argmax(-1)


def score(metric: str, predictions: np.ndarray, gold: np.ndarray) -> float:
    """``metric`` of ``predictions`` on the whole set (the same code the bootstrap resamples)."""
    return float(resampled_metric(metric, predictions, gold, np.arange(len(gold))[None, :])[0])


def _mean_sd(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "sd": float(np.std(values, ddof=1)) if len(values) > 1 else math.nan,
            "per_seed": values}


def _average_bootstrap(tasks: dict[str, dict], resamples: int, seed: int, chunk: int = 250) -> dict:
    """Paired bootstrap of the average over tasks: each task's dev examples resampled independently, the same
    draw for both arms and every seed; the statistic is the seed-averaged difference of the task-averaged score."""
    rng = np.random.default_rng(seed)
    observed = float(np.mean([t["difference"]["mean"] for t in tasks.values()]))
    diffs = []
    for start in range(0, resamples, chunk):
        r = min(chunk, resamples - start)
        total = np.zeros(r)
        for t in tasks.values():
            gold = t["gold"]
            index = rng.integers(0, len(gold), size=(r, len(gold)))
            per_seed = [resampled_metric(t["metric"], a, gold, index) - resampled_metric(t["metric"], b, gold, index)
                        for a, b in zip(t["arm_a"], t["arm_b"])]
            total += np.mean(per_seed, axis=0)
        diffs.append(total / len(tasks))
    d = np.concatenate(diffs)
    return {"observed": observed, "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5)),
            "p_not_better": float((d <= 0).mean()), "resamples": resamples, "seed": seed}


def analyse(predictions: dict[str, dict[int, dict[str, np.ndarray]]], gold: dict[str, np.ndarray],
            metrics: dict[str, str], arm_a: str = DISTILLED, arm_b: str = GOLD_ONLY,
            resamples: int = BOOTSTRAP_RESAMPLES, bootstrap_seed: int = 0) -> dict[str, Any]:
    """The fixed analysis of a paired comparison.

    Args:
        predictions: ``{arm: {seed: {task: (n_task,) predictions}}}``; both arms have the same seeds.
        gold: ``{task: (n_task,)}`` dev labels. metrics: ``{task: first metric}`` (a key of
            :data:`mtdnn.distillation.paired.RESAMPLED_METRICS`).
        arm_a, arm_b: the arms compared, difference = A - B.
        resamples, bootstrap_seed: the paired bootstrap's settings.

    Returns:
        ``{"seeds", "arms", "tasks": {task: {metric, <arm>: mean/sd/per_seed, difference: t-interval,
        bootstrap}}, "average": {...the same over the task average...}}``.

    Raises:
        ValueError: the arms were run with different seeds.
    """
    seeds = sorted(predictions[arm_a])
    if seeds != sorted(predictions[arm_b]):
        raise ValueError(f"the arms have different seeds ({seeds} against {sorted(predictions[arm_b])})")
    out: dict[str, Any] = {"seeds": seeds, "arms": [arm_a, arm_b], "tasks": {}}
    internal: dict[str, dict] = {}
    for task, metric in metrics.items():
        a = [predictions[arm_a][s][task] for s in seeds]
        b = [predictions[arm_b][s][task] for s in seeds]
        scores_a = [score(metric, p, gold[task]) for p in a]
        scores_b = [score(metric, p, gold[task]) for p in b]
        diff = t_interval([x - y for x, y in zip(scores_a, scores_b)])
        out["tasks"][task] = {"metric": metric, "examples": int(len(gold[task])), arm_a: _mean_sd(scores_a),
                              arm_b: _mean_sd(scores_b), "difference": diff,
                              "bootstrap": paired_bootstrap(metric, a, b, gold[task], resamples, bootstrap_seed)}
        internal[task] = {"metric": metric, "gold": gold[task], "arm_a": a, "arm_b": b, "difference": diff}
    avg_a = [float(np.mean([out["tasks"][t][arm_a]["per_seed"][i] for t in metrics])) for i in range(len(seeds))]
    avg_b = [float(np.mean([out["tasks"][t][arm_b]["per_seed"][i] for t in metrics])) for i in range(len(seeds))]
    out["average"] = {arm_a: _mean_sd(avg_a), arm_b: _mean_sd(avg_b),
                      "difference": t_interval([x - y for x, y in zip(avg_a, avg_b)]),
                      "bootstrap": _average_bootstrap(internal, resamples, bootstrap_seed)}
    return out


def render_markdown(result: dict, teachers: dict | None = None, title: str = "Paired comparison") -> str:
    """The comparison's table: per task and the average, each arm's mean +- sd, the paired difference with its
    95% t-interval and bootstrap interval, and (with ``teachers``, a teacher report) the members' mean and the
    ensemble."""
    a, b = result["arms"]
    f = lambda v: "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"  # noqa: E731
    lines = [f"# {title}", "",
             f"Seeds {result['seeds']} per arm; the arms differ only in alpha. Difference = {a} - {b} on dev (each "
             "task's first metric); t: paired 95% t-interval over seeds; bootstrap: 95% percentile interval of "
             f"the seed-averaged difference over {result['average']['bootstrap']['resamples']} paired resamples of "
             f"the dev examples (seed {result['average']['bootstrap']['seed']}), and the share of resamples with "
             "difference <= 0.", ""]
    header = ["task", "metric", a, b, "difference", "t-interval", "bootstrap", "P(diff <= 0)"]
    header += ["members' mean", "ensemble"] if teachers else []

    def row(name, metric, r, teacher):
        d, boot = r["difference"], r["bootstrap"]
        cells = [name, metric, f"{f(r[a]['mean'])} ± {f(r[a]['sd'])}", f"{f(r[b]['mean'])} ± {f(r[b]['sd'])}",
                 f(d["mean"]), f"[{f(d['low'])}, {f(d['high'])}]", f"[{f(boot['low'])}, {f(boot['high'])}]",
                 f(boot["p_not_better"])]
        if teachers:
            cells += [f(teacher[0]) if teacher else "", f(teacher[1]) if teacher else ""]
        return cells

    rows = []
    for name, r in result["tasks"].items():
        t = (teachers or {}).get("tasks", {}).get(name)
        rows.append(row(name, r["metric"], r, (t["mean"], t["ensemble"]["score"]) if t else None))
    avg = (teachers or {}).get("average")
    rows.append(row("**average**", "", result["average"], (avg["mean"], avg["ensemble"]) if avg else None))
    return "\n".join(lines + markdown_table(header, rows)) + "\n"


# ------------------------------------------------------------------------------------------------- the runs

COMPARISON_JSON, COMPARISON_MD = "comparison.json", "comparison.md"


def is_comparison_dir(directory: Path) -> bool:
    """Whether ``directory`` is a paired comparison's (written before output directories had a record file): its
    ``comparison.json``, or only ``seed-<s>/`` folders of arm runs."""
    if (directory / COMPARISON_JSON).is_file():
        return True
    entries = list(directory.iterdir())
    return bool(entries) and all(e.is_dir() and re.fullmatch(r"seed-\d+", e.name) for e in entries)


def check_comparison_dir(spec, spec_path: str, output_dir: str | None) -> Path:
    """The comparison's directory (``output_dir``, else the spec's ``output_dir`` + ``-paired``), checked before any
    teacher or arm is trained: new, empty or a paired comparison's (:func:`is_comparison_dir`).

    Raises:
        UserError: it holds other files or another kind of toolkit output.
    """
    out_dir = Path(output_dir or f"{spec.output_dir}-paired")
    return check_output_dir(out_dir, "--output-dir" if output_dir else f"{spec_path}: field 'output_dir' (+ '-paired')",
                            "comparison", recognised=is_comparison_dir)


def arm_spec(spec, arm: str, seed: int):
    """The student spec of one (arm, seed): the spec's alpha for the distilled arm, 0 for the gold-only one, and
    ``seed`` for the run (initialisation of new heads, dropout masks, schedule and data order)."""
    alpha = spec.alpha if arm == DISTILLED else 0.0
    return spec.model_copy(update={"alpha": alpha, "train": spec.train.model_copy(update={"seed": seed})})


ARM_SETTINGS = ("alpha", "temperature", "distill", "gold", "loss_weights", "init")
"""What a complete arm's ``resolved.student`` must match, beside its training settings (``config.yaml``'s fields)."""


def check_arm(run_dir, spec, tasks: dict, data_dir, lightning: dict | None, which: str) -> None:
    """Reuse a complete arm only when it was trained as this arm would be: its ``config.yaml`` fields (the
    student's :class:`~mtdnn.training.config.TrainConfig`, except where the data, the run and the encoder files lie
    and the other settings that do not change training, :data:`~mtdnn.training.resume.RESUME_MAY_DIFFER`) and
    :data:`ARM_SETTINGS` of its ``resolved.student``. Arms written by earlier versions compare the same way.

    Raises:
        ConfigError: naming the arm, its directory and the first setting that differs.
    """

    saved, resolved = read_run_config(run_dir)
    config = student_config(spec, tasks, data_dir, saved.get("encoder", ""), str(run_dir), lightning).to_yaml_dict()
    ignored = RESUME_MAY_DIFFER | {"encoder"}
    differences = [d for d in config_differences({k: saved.get(k) for k in config if k not in ignored},
                                                 {k: v for k, v in config.items() if k not in ignored})]
    student_saved = resolved.get("student") if isinstance(resolved.get("student"), dict) else {}
    wanted = spec.model_dump(mode="json")
    differences += config_differences({k: student_saved.get(k) for k in ARM_SETTINGS},
                                      {k: wanted.get(k) for k in ARM_SETTINGS}, "student.")
    if differences:
        key, was, now = differences[0]
        raise ConfigError(f"{run_dir}: the complete {which} was trained with other settings ({key}: {was!r}, this "
                          f"comparison's {now!r}); compare into another --output-dir, or remove that arm to retrain it")


def check_comparable(spec, spec_path: str) -> None:
    """Every ``distill`` task's first metric must be one the paired bootstrap resamples example by example
    (:data:`~mtdnn.distillation.paired.RESAMPLED_METRICS`); checked before any teacher or arm is trained.

    Raises:
        ConfigError: naming the tasks whose metric is not (entity F1 and SQuAD EM/F1 of the token-level types,
            which score entities and questions over windows).
    """
    tasks = student.student_tasks(spec, spec_path)
    other = [f"{n} ({tasks[n].metric_names[0]})" for n in spec.distill
             if tasks[n].metric_names[0] not in RESAMPLED_METRICS]
    if other:
        raise ConfigError(f"{spec_path}: field 'distill': the paired comparison (--seeds) resamples dev examples with "
                          f"{', '.join(RESAMPLED_METRICS)}; it cannot score {', '.join(other)}: compare without "
                          "those tasks (move them to 'gold' or leave them out)")


def run_comparison(spec, spec_path: str, *, seeds: int, data_dir, teachers_dir: str | None = None,
                   from_run: str | None = None, output_dir: str | None = None, lightning: dict | None = None,
                   resamples: int = BOOTSTRAP_RESAMPLES, device: str = "cpu") -> dict:
    """Train both arms for ``seeds`` seeds (the spec's ``train.seed``, +1, ...), then analyse them.

    Runs go to ``<output_dir>/seed-<s>/<arm>/`` (default ``output_dir``: the spec's, plus ``-paired``); a complete
    run is reused, so an interrupted comparison resumes. ``comparison.json`` and ``comparison.md`` are written
    last, atomically.

    Raises:
        ConfigError: fewer than 2 seeds, a spec without ``distill`` tasks (nothing to compare), or a task whose
            metric is not resampled (:func:`check_comparable`).
        (and what :func:`mtdnn.distillation.student.distill` raises)
    """
    if seeds < 2:
        raise ConfigError(f"--seeds: a paired comparison needs at least 2 seeds (got {seeds})")
    if not spec.distill:
        raise ConfigError(f"{spec_path}: field 'distill': no task to distil, so nothing to compare")
    check_comparable(spec, spec_path)
    out_dir = check_comparison_dir(spec, spec_path, output_dir)
    seed_list = [spec.train.seed + i for i in range(seeds)]
    tasks = student.student_tasks(spec, spec_path)
    teacher_dir = Path(teachers_dir or spec.teachers)
    predictions: dict[str, dict[int, dict]] = {DISTILLED: {}, GOLD_ONLY: {}}
    logged: dict[str, dict[int, dict]] = {DISTILLED: {}, GOLD_ONLY: {}}
    gold, metrics = {}, {}
    for name in spec.distill:
        raw = load_split(tasks[name], "dev", Path(data_dir))
        gold[name] = {ex.id: ex.label for ex in raw.examples}
        metrics[name] = tasks[name].metric_names[0]
    claim_output_dir(out_dir, "comparison")
    for seed in seed_list:
        for arm in (DISTILLED, GOLD_ONLY):
            run_dir = out_dir / f"seed-{seed}" / arm
            wanted = arm_spec(spec, arm, seed)
            if read_metrics(run_dir) is None:  # new, or interrupted: resumed from its last.ckpt (else retrained)
                student.distill(wanted, spec_path, data_dir=Path(data_dir), from_run=from_run,
                                teachers_dir=str(teacher_dir), output_dir=str(run_dir), lightning=lightning,
                                **continue_unfinished(run_dir))
            else:
                check_arm(run_dir, wanted, tasks, Path(data_dir), lightning, f"{arm} arm of seed {seed}")
            best = read_metrics(run_dir)["best"]["tasks"]
            predictions[arm][seed], logged[arm][seed] = {}, {}
            for name in spec.distill:
                ids, outputs = member_outputs(run_dir / "export", name, "dev", Path(data_dir),
                                              spec.train.eval_batch_size, spec.train.max_length, device)
                order = {i: j for j, i in enumerate(ids)}
                rows = [order[i] for i in gold[name]]
                predictions[arm][seed][name] = predictions_of(tasks[name].type, outputs[rows])
                logged[arm][seed][name] = best[name][metrics[name]]
    gold_arrays = {n: np.asarray(list(g.values())) for n, g in gold.items()}
    result = analyse(predictions, gold_arrays, metrics, resamples=resamples)
    result["logged"] = {arm: {str(s): v for s, v in per.items()} for arm, per in logged.items()}
    result["spec"], result["alpha"], result["teachers"] = str(spec_path), spec.alpha, str(teacher_dir)
    report = summarize(teacher_dir, {n: tasks[n] for n in spec.distill}, Path(data_dir))
    result["members_mean"] = {n: t["mean"] for n, t in report["tasks"].items()}
    result["ensemble"] = {n: t["ensemble"]["score"] for n, t in report["tasks"].items()}
    result["members_mean"]["average"], result["ensemble"]["average"] = report["average"]["mean"], report["average"]["ensemble"]
    write_json_atomic(out_dir / COMPARISON_JSON, result)
    write_atomic(out_dir / COMPARISON_MD, render_markdown(
        result, report, f"Paired comparison: distilled (alpha = {spec.alpha:g}, T = {spec.temperature:g}) against "
                        f"gold-only (alpha = 0), {spec_path}"))
    return result
