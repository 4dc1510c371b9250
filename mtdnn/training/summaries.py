"""What a complete run writes about itself: ``schedule.json`` and ``metrics.json``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..modeling.scores import float32_digits, rounded_scores


def schedule_summary(step_log: list[tuple[int, str]], schedule: str, batch_size: int,
                     accumulate_grad_batches: int = 1) -> dict:
    """``schedule.json``: the task of every batch per epoch and the realised batch counts.

    With gradient accumulation an optimizer step is ``accumulate_grad_batches`` consecutive batches (each one
    task's); ``steps`` counts batches.
    """
    epochs = sorted({e for e, _ in step_log})
    per_epoch = []
    for epoch in epochs:
        steps = [t for e, t in step_log if e == epoch]
        per_epoch.append({"epoch": epoch + 1, "steps": steps, "batches_per_task": dict(Counter(steps))})
    summary = {"schedule": schedule, "global_batch_size": batch_size, "steps": len(step_log),
               "batches_per_task": dict(Counter(t for _, t in step_log)), "epochs": per_epoch}
    if accumulate_grad_batches > 1:
        summary["accumulate_grad_batches"] = accumulate_grad_batches
    return summary


def _rounded(entry: dict) -> dict:
    return {**entry, "tasks": rounded_scores(entry["tasks"]), "average": float32_digits(entry["average"])}


def metrics_summary(history: list[dict], best_checkpoint: Path, run_dir: Path, stopped_early: dict | None = None) -> dict:
    """``metrics.json``: dev scores per evaluation and the best one (highest average, first on ties), each score to
    the 7 significant digits of the float32 metrics (:func:`float32_digits`).

    Each entry of ``epochs`` is one dev evaluation (per epoch, or every N steps with ``eval_every_n_steps``); its
    ``step`` is the optimizer steps done, the ``step`` of the same evaluation's row in ``logs/metrics.csv``.
    """
    history = [_rounded(entry) for entry in history]
    best = max(history, key=lambda h: h["average"])  # max keeps the first of equal values
    summary = {"status": "complete", "epochs": history,
               "best": {"epoch": best["epoch"], **({"step": best["step"]} if "step" in best else {}),
                        "checkpoint": str(best_checkpoint.resolve().relative_to(run_dir.resolve())),
                        "tasks": best["tasks"], "average": best["average"]}}
    if stopped_early:
        summary["stopped_early"] = stopped_early
    return summary
