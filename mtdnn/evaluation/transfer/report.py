"""The report of a sweep: ``results.json`` (:func:`build_report`), ``results.md`` (:func:`render_markdown`) and
``learning_curve.png`` (:func:`plot_learning_curve`)."""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from ...tables import markdown_table
from ...tasks.taskdef import TaskDef
from .encoders import Encoder
from .settings import TransferSettings
from .spec import TransferSpec

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
CURVE_PNG = "learning_curve.png"

def summarise(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def limits_text(limits: dict) -> str:
    """``{"limit_train_examples": 64}`` -> ``--limit-train-examples 64``."""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in limits.items())


def chance_level(metric: str, labels: list[int], names: list[str]) -> dict | None:
    """What a model without the input scores: for accuracy, always predicting the most frequent class of the
    scored evaluation examples ``labels``; for MCC, 0. None for other metrics."""
    if metric == "accuracy" and labels:
        majority = max(set(labels), key=labels.count)
        return {"value": labels.count(majority) / len(labels), "what": f"majority class ({names[majority]})"}
    if metric == "mcc":
        return {"value": 0.0, "what": "MCC of a constant prediction"}
    return None


def _pct(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def render_markdown(report: dict) -> str:
    """``results.md``: the table of mean ± standard deviation (percent) per encoder and size, then the set-up."""
    metric, seeds = report["metric"], report["seeds"]
    pool, evaluation = report["pool"], report["evaluation"]
    sizes = report["sizes"]
    lines = [f"# Few-shot transfer: {report['task']}", ""]
    if report.get("smoke_test"):  # first, where `python -m mtdnn.transfer` prints it too
        lines += ["**SMOKE TEST**, not a measurement: " + "; ".join(report["smoke_test"]) + ".", ""]
    spread = (f"mean ± sample standard deviation over {len(seeds)} seeds ({', '.join(map(str, seeds))})"
              if len(seeds) > 1 else f"one seed ({seeds[0]}), so no standard deviation")
    lines.append(f"{metric.capitalize()} (%) on the `{evaluation['split']}` split ({evaluation['examples']} examples), "
                 f"after fine-tuning on n examples of the `{pool['split']}` split ({pool['examples']} examples); "
                 f"{spread}.")
    rows = [[enc["label"]] + [_pct(row["mean"]) + (f" ± {_pct(row['std'])}" if row["std"] is not None else "")
                              for row in report["results"][enc["label"]]] for enc in report["encoders"]]
    lines += [""] + markdown_table(["encoder"] + [f"n = {s['n_examples']} ({100 * s['fraction_of_pool']:.3g}% of pool)"
                                                  for s in sizes], rows, align="l" + "r" * len(sizes))
    lines += ["", "## Set-up", ""]
    lines.append(f"- Task `{report['task']}` from `{report['task_defs']}`"
                 + (f": {report['description']}" if report.get("description") else "."))
    counts = ", ".join(f"{k} {v}" for k, v in pool["class_counts"].items())
    lines.append(f"- Pool (training subsets are drawn from it): split `{pool['split']}`, `{pool['source']}`, "
                 f"{pool['examples']} examples ({counts}).")
    lines.append(f"- Evaluation: split `{evaluation['split']}`, `{evaluation['source']}`, {evaluation['examples']} "
                 "examples, scored once after the last epoch (no model selection on it).")
    lines.append("- Subsets: one stratified order of the pool per seed; every subset is a prefix of it, so smaller "
                 "subsets lie inside larger ones and every encoder sees the same examples. Fractions are of the pool.")
    lines.append(f"- Hyper-parameters, the same for every encoder: {report['settings']['description']}; max length "
                 f"{report['max_length']} tokens; training seed = seed index.")
    rows = []
    for enc in report["encoders"]:
        trained = ", ".join(f"{name} (`{info['train']}`)" if info.get("train") else name
                            for name, info in enc["trained_on"].items()) or "-"
        rows.append([enc["label"], enc["kind"], f"`{enc['spec']}`", enc["head"], trained])
    lines += [""] + markdown_table(["encoder", "kind", "source", "head", "trained on"], rows)
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"]]
    lines += ["", f"## {metric.capitalize()} per seed (%)", ""]
    rows = [[enc["label"], str(row["n_examples"])] + [_pct(v) for v in row["accuracies"]]
            + [f"{statistics.fmean(row['train_seconds']):.0f}"]
            for enc in report["encoders"] for row in report["results"][enc["label"]]]
    lines += markdown_table(["encoder", "n"] + [f"seed {s}" for s in seeds] + ["train s (mean)"], rows,
                            align="lr" + "r" * (len(seeds) + 1))
    return "\n".join(lines) + "\n"


def plot_learning_curve(report: dict, path: Path) -> None:
    """``learning_curve.png``: accuracy (%) against training examples, log x, one line per encoder; chance
    (:func:`chance_level`) as a dashed line, and "SMOKE TEST" across the axes when the report has limits.

    Error bars are one sample standard deviation over seeds, drawn only when there is one (two or more seeds).
    Written to a temporary file beside ``path`` and renamed into place.
    """
    # a Figure of its own (no pyplot, no global backend switch), whose savefig renders the PNG with the Agg canvas
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    count = len(report["encoders"])
    for i, enc in enumerate(report["encoders"]):
        rows = report["results"][enc["label"]]
        dodge = 1.025 ** (i - (count - 1) / 2)  # side by side on the log axis, so error bars do not overlap
        xs = [r["n_examples"] * dodge for r in rows]
        ys = [100 * r["mean"] for r in rows]
        errors = None if any(r["std"] is None for r in rows) else [100 * r["std"] for r in rows]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3 if errors else 0, label=enc["label"])
    sizes = [s["n_examples"] for s in report["sizes"]]
    chance = report.get("chance")
    if chance:
        ax.axhline(100 * chance["value"], linestyle="--", color="gray", linewidth=1,
                   label=f"chance: {chance['what']}")
    if report.get("smoke_test"):  # limited evaluation or a limited encoder: say so on the figure itself
        ax.text(0.5, 0.5, "SMOKE TEST", transform=ax.transAxes, ha="center", va="center", fontsize=28,
                color="red", alpha=0.25, rotation=20)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel(f"training examples from the {report['pool']['split']} pool (log scale)")
    ax.set_ylabel(f"{report['metric']} on {report['evaluation']['split']} (%)")
    seeds = len(report["seeds"])
    ax.set_title(f"{report['task']}: few-shot transfer ({seeds} seed{'s' if seeds > 1 else ''}"
                 + (", ±1 s.d." if seeds > 1 else "") + ")")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_report(task: TaskDef, args: TransferSpec, settings: TransferSettings, encoders: list[Encoder], records: dict,
                 seeds: list[int], sizes: list[int], origin: dict[int, str], pool_raw, eval_raw, eval_examples: int,
                 metric: str) -> dict:
    """The content of ``results.json`` (and, rendered, of ``results.md`` and the plot).

    ``records[label][size][seed]`` are the per-run records (``metrics``, ``train_seconds``, ...); ``pool_raw``
    and ``eval_raw`` the parsed pool and evaluation splits (:class:`mtdnn.tasks.data.RawSplit`), of which the first
    ``eval_examples`` were scored; ``origin`` says how each size was asked for; ``args`` is the sweep's
    :class:`~mtdnn.evaluation.transfer.spec.TransferSpec` (recorded whole under ``"args"``).
    """
    pool_split, eval_split = pool_raw.split, eval_raw.split
    pool_labels = [int(ex.label) for ex in pool_raw.examples]
    pool_size = len(pool_labels)
    class_counts = {task.labels[c]: pool_labels.count(c) for c in sorted(set(pool_labels))}
    notes = []
    if "train" not in task.splits:
        notes.append(f"Task '{task.name}' has no train split here: the pool is its '{pool_split}' split "
                     f"({pool_size} examples) and the evaluation set its '{eval_split}' split.")
    missing = [name for name in task.labels if name not in class_counts]
    if missing:
        notes.append(f"The pool holds no example of {', '.join(missing)}.")
    if task.drop_labels:
        notes.append(f"Rows whose gold label is one of {task.drop_labels} (no gold label) are removed, as is standard: "
                     f"{pool_raw.dropped} from the pool's file, {eval_raw.dropped} from the evaluation file.")
    smoke = []
    if eval_examples < len(eval_raw.examples):
        smoke.append(f"only the first {eval_examples} of the {len(eval_raw.examples)} evaluation examples were "
                     "scored (--limit-eval-examples)")
    smoke += [f"encoder {e.label} comes from a limited run ({limits_text(e.limited)}), not a trained one"
              for e in encoders if e.limited]
    notes += [f"SMOKE TEST: {reason}." for reason in smoke]
    notes.extend(args.note)
    results = {}
    for encoder in encoders:
        rows = []
        for k in sizes:
            per_seed = [records[encoder.label][k][s] for s in seeds]
            values = [r["metrics"][metric] for r in per_seed]
            mean, std = summarise(values)
            rows.append({"n_examples": k, "fraction_of_pool": k / pool_size, "batch_size": settings.batch_size(k),
                         "accuracies": values, "mean": mean, "std": std,
                         "train_seconds": [r["train_seconds"] for r in per_seed],
                         "eval_seconds": [r["eval_seconds"] for r in per_seed]})
        results[encoder.label] = rows
    report = {
        "command": "transfer", "task": task.name, "task_defs": str(args.task_defs), "description": task.description,
        "metric": metric, "seeds": seeds,
        "sizes": [{"n_examples": k, "fraction_of_pool": k / pool_size, "asked_as": origin[k]} for k in sizes],
        "pool": {"split": pool_split, "source": pool_raw.source, "examples": pool_size, "class_counts": class_counts,
                 "dropped_rows": pool_raw.dropped},
        "evaluation": {"split": eval_split, "source": eval_raw.source, "examples": eval_examples,
                       "split_examples": len(eval_raw.examples), "dropped_rows": eval_raw.dropped},
        "settings": {**settings.record(), "batch_size_rule": settings.batch_size_rule,
                     "description": settings.describe(), "training_seed": "the seed index"},
        "max_length": task.max_length,
        "encoders": [{"label": e.label, "spec": e.spec, "kind": e.kind, "path": e.path, "head": e.head,
                      "trained_on": e.trained_on, "limited": e.limited} for e in encoders],
        "chance": chance_level(metric, [int(ex.label) for ex in eval_raw.examples[:eval_examples]], task.labels or []),
        "smoke_test": smoke,
        "results": results, "notes": notes,
        "args": args.model_dump(),
    }
    return report
