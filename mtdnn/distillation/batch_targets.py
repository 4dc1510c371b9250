"""The student's side of the cached soft targets: what each training batch takes its ``teacher_logits`` from.

The rows come aligned to the student's training split (:func:`mtdnn.distillation.soft_targets.teacher_outputs`):
``(n, members, outputs)`` per example, or per row ``(members, pieces, width)`` for a type with per-piece soft
targets (:mod:`mtdnn.distillation.pieces`), placed at the row's real positions of the batch.
"""

from __future__ import annotations

import numpy as np
import torch

from .pieces import MASKED


class ExampleBatchTargets:
    """The members' outputs ``(n, members, outputs)`` of a split's rows; a batch gets the rows ``batch.idx``."""

    def __init__(self, outputs: torch.Tensor):
        self.outputs = outputs

    def for_batch(self, batch: dict) -> torch.Tensor:
        return self.outputs[batch.idx]


class PieceBatchTargets:
    """The members' per-piece outputs of a split's rows (aligned to the rows), placed into each batch.

    Args:
        rows: per row of the split, ``(members, pieces, width)`` float32.
    """

    def __init__(self, rows: list[torch.Tensor]):
        self.rows = rows

    def for_batch(self, batch: dict) -> torch.Tensor:
        """``(batch, members, seq_len, width)``: row ``batch.idx[r]``'s outputs at the real positions of
        ``batch.attention_mask[r]``, :data:`~mtdnn.distillation.pieces.MASKED` elsewhere.

        Raises:
            RuntimeError: a row's piece count differs from its cached outputs' (never after
                :func:`mtdnn.distillation.piece_targets.check_student`).
        """
        real = batch.attention_mask.bool()
        members, _, width = self.rows[0].shape
        out = torch.full((real.shape[0], members, real.shape[1], width), MASKED)
        for r, i in enumerate(batch.idx.tolist()):
            row = self.rows[i]
            if row.shape[1] != int(real[r].sum()):
                raise RuntimeError(f"row {i} of task '{batch.task}' has {int(real[r].sum())} pieces, its cached "
                                   f"teacher outputs {row.shape[1]}")
            out[r][:, real[r]] = row
        return out


def batch_targets(rows: np.ndarray | list[np.ndarray]) -> ExampleBatchTargets | PieceBatchTargets:
    """What a student's batches take their ``teacher_logits`` from: rows aligned to the training split,
    ``(n, members, outputs)`` per example, or a list of per-piece ``(members, pieces, width)`` rows."""
    if isinstance(rows, list):
        return PieceBatchTargets([torch.from_numpy(np.ascontiguousarray(r, dtype=np.float32)) for r in rows])
    return ExampleBatchTargets(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)))
