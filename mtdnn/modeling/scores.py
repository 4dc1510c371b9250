"""How scores are written: every file that records a metric rounds it the same way (no torch here, so that the
run summaries and reports stay importable without it)."""

from __future__ import annotations


def float32_digits(value: float) -> float:
    """``value`` to the 7 significant digits a float32 metric holds, as every written score is (``metrics.json``,
    ``evaluate``'s JSON): ``0.5099999904632568`` (float32's 0.51 read as a float64) becomes ``0.51``; NaN stays
    NaN. Relative change at most 5e-7."""
    return float(f"{value:.7g}")


def rounded_scores(scores: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``{task: {metric: value}}`` with every value through :func:`float32_digits`."""
    return {task: {metric: float32_digits(v) for metric, v in values.items()} for task, values in scores.items()}
