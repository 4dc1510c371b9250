"""The per-piece shape of soft targets (token-level task types: sequence labelling, extractive QA): what a teacher
member's outputs over a split are, and the digest that ties them to the split's word pieces.

A type with ``soft_target_pieces`` (:class:`mtdnn.tasks.types.SoftTargetPieces`) has its soft targets per word
piece. A member's outputs over a split are one row per row of the tokenized split (a sentence; a QA window, whose
id ``<question id>#<window>`` is stable), each ``(pieces, width)`` float32 over the row's real pieces (tag logits;
start and end logits), with the row's label mask (the type's ``mask``: 1 on the first piece of each word; on every
piece of a window). The cache (:mod:`mtdnn.distillation.soft_targets`) stores them flattened with the piece count,
plus a digest of the split's pieces (ids and input ids): a soft target belongs to one piece, so the student must
see exactly the teachers' pieces (same tokenizer, ``max_length``, ``doc_stride`` and data), which
:func:`mtdnn.distillation.piece_targets.check_student` verifies before anything is written.

In a student batch (:mod:`mtdnn.distillation.batch_targets`), each row's ``(members, pieces, width)`` is placed at
the row's real positions, :data:`MASKED` at padding: q is 0 there for a distribution over pieces (span), and a tag
distribution at a piece without a label is ignored by the loss
(:func:`mtdnn.modeling.token_heads.token_distillation_loss`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from ..tasks.tokenized import TokenizedSplit
from ..tasks.collate import collate
from ..tasks.schedule import EvalBatchSampler
from ..tasks.taskdef import TaskDef

MASKED = -1e4  # the logit of padding positions (as mtdnn.modeling.token_heads.MASKED)


@dataclass
class PieceOutputs:
    """One member's per-piece outputs over a split, in the split's row order.

    Attributes:
        rows: per row, ``(pieces, width)`` float32 logits over the row's real pieces.
        masks: per row, the label mask (``pieces`` ints, 1 where the soft loss reads the piece).
        pieces: :func:`pieces_digest` of the split the outputs were computed on.
    """

    rows: list[np.ndarray]
    masks: list[list[int]]
    pieces: str


def pieces_digest(split: TokenizedSplit) -> str:
    """A hash of a tokenized split's row ids and input ids: equal digests, equal pieces row by row."""
    h = hashlib.sha256()
    for row_id, ids in zip(split.ids, split.input_ids):
        h.update(str(row_id).encode() + b"\0")
        h.update(np.asarray(ids, dtype=np.int64).tobytes())
    return h.hexdigest()[:24]


@torch.inference_mode()
def piece_outputs(model, task: TaskDef, split: TokenizedSplit, pad_token_id: int, batch_size: int = 64,
                  device: str = "cpu") -> PieceOutputs:
    """Run a model (eval mode) over a split, batched as dev evaluation is, keeping each row's real pieces.

    Returns:
        :class:`PieceOutputs`: per row ``(pieces, width)`` float32 head outputs, read at the row's
        ``attention_mask`` positions (right or left padding alike), the type's label masks and the pieces digest.
    """
    rows: list = [None] * len(split)
    for keys in EvalBatchSampler(split.lengths, batch_size):
        batch = collate([split[k] for k in keys], task, pad_token_id, padding_side=split.padding_side)
        types = batch.token_type_ids
        out = model(task.name, batch.input_ids.to(device), batch.attention_mask.to(device),
                    None if types is None else types.to(device)).float().cpu()
        real = batch.attention_mask.bool()
        for r, i in enumerate(batch.idx.tolist()):
            rows[i] = out[r][real[r]].numpy()
    return PieceOutputs(rows, task.kind.soft_target_pieces.mask(split), pieces_digest(split))
