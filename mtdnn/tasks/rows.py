"""The row shapes every task type shares: a parsed :class:`Example`, the labelled splits, the ignored label.

The lowest module of :mod:`mtdnn.tasks` (no imports from the package, no torch), so that the task types
(:mod:`mtdnn.tasktypes`) and :mod:`mtdnn.tasks.data` can all use it; padding into tensors is
:mod:`mtdnn.tasks.padding`.
"""

from __future__ import annotations

from dataclasses import dataclass

IGNORE = -100
"""The label of a position no loss or metric counts (the ``ignore_index`` of cross-entropy): pieces after a word's
first, special tokens and padding (sequence labelling), tokens that are not predicted (mlm)."""

LABELLED_SPLITS = ("train", "dev")
"""Splits that must carry labels: training reads the gold of one, dev scoring that of the other."""


@dataclass
class Example:
    """One parsed row: texts, label (class id, score or correct-candidate index; None when unlabelled)."""

    id: str
    line: int
    text_a: str
    text_b: str | None = None
    candidates: list[str] | None = None
    label: int | float | None = None
