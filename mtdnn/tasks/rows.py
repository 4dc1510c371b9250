"""The row shapes every task type shares: a parsed :class:`Example` and padding of token sequences.

The lowest module of :mod:`mtdnn.tasks` (no imports from the package), so that the per-type modules
(:mod:`mtdnn.tasks.sentence`, :mod:`mtdnn.tasks.mlm`) and :mod:`mtdnn.tasks.data` can all use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

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


def pad(sequences: Sequence[Sequence[int]], value: int, pad_to_multiple_of: int = 1) -> torch.Tensor:
    """Right-pad integer sequences into ``(len(sequences), seq_len)`` int64, ``seq_len`` the longest rounded up
    to ``pad_to_multiple_of``."""
    longest = max(len(s) for s in sequences)
    seq_len = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    out = torch.full((len(sequences), seq_len), value, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def attention_mask(sequences: Sequence[Sequence[int]], seq_len: int) -> torch.Tensor:
    """``(len(sequences), seq_len)`` int64: 1 on each sequence's tokens, 0 on padding."""
    mask = torch.zeros((len(sequences), seq_len), dtype=torch.long)
    for row, s in enumerate(sequences):
        mask[row, : len(s)] = 1
    return mask
