"""Grouped bar charts for the diagnostics, written atomically: a ``matplotlib.figure.Figure`` of its own (no pyplot, no
global backend switch; ``savefig`` renders a PNG with the Agg canvas, so no display is needed)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure

from ...fileio import default_mode, make_dir


def grouped_bars(path: str | Path, groups: Sequence[str], series: dict[str, Sequence[float | None]], title: str,
                 ylabel: str = "accuracy", errors: dict[str, Sequence[float | None]] | None = None,
                 reference: tuple[str, float] | None = None) -> Path:
    """Write a grouped bar chart PNG: one group of bars per entry of ``groups``, one bar per series.

    Args:
        path: the PNG to write (through a temporary file and a rename).
        groups: x-axis group names.
        series: legend name -> one value per group (None: no bar).
        errors: legend name -> one standard deviation per group (error bars), optional.
        reference: (name, y) of a dashed horizontal line, e.g. ("chance", 0.5).
    """

    path = Path(path)
    width = 0.8 / max(len(series), 1)
    fig = Figure(figsize=(max(4.0, 1.4 * len(groups) * max(len(series), 1) * 0.6 + 2), 3.6))
    ax = fig.subplots()
    for s, (name, values) in enumerate(series.items()):
        xs = [g + (s - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in values]
        err = None
        if errors and name in errors:
            err = [e if e is not None else 0.0 for e in errors[name]]
        bars = ax.bar(xs, heights, width, label=name, yerr=err, capsize=3 if err else 0)
        for bar, value in zip(bars, values):
            if value is not None:
                ax.annotate(f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    if reference is not None:
        ax.axhline(reference[1], linestyle="--", color="grey", linewidth=1, label=reference[0])
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", ncol=len(series) + (reference is not None), frameon=False)
    fig.tight_layout()
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.chmod(tmp, default_mode())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
