"""Collation: a tokenized split's items -> the task type's typed batch, padded on the right or (XLNet) the left."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .batch import Batch
from .taskdef import TaskDef



def collate(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
            tokenizer=None, padding_side: str = "right") -> Batch:
    """Pad a list of items from :class:`TokenizedSplit` into a batch for ``task`` (dynamic padding), with the
    type's collation (:meth:`mtdnn.tasks.types.TaskKind.collate`). ``padding_side``: the tokenizer's; ``left``
    moves every row's padding before its tokens (:func:`pad_left`; XLNet, whose summary token <cls> then sits in
    the last position of every row).

    Returns the type's :class:`~mtdnn.tasks.batch.Batch`: ``task`` (name), ``input_ids``, ``attention_mask`` and, if
    present, ``token_type_ids``, each ``(batch * num_candidates, seq_len)`` int64 with ``seq_len`` the longest
    sequence rounded up to ``pad_to_multiple_of``; ``idx`` ``(batch,)`` row positions; ``weight`` ``(batch,)``
    float32 (0 masks an example out of loss and metrics: used for DDP padding); ``labels`` (the type's shape:
    ``(batch,)`` int64 class or candidate index, or float32 score, for the sentence-level types) when the split is
    labelled; ``head_inputs``, a dict of tensors the head needs beyond the encoder's output (e.g. SAN's
    ``sequence_ids``), when the type has any. ``tokenizer``: needed by
    types that change tokens when collating (``mlm`` masks them; :mod:`mtdnn.tasktypes.mlm` gives its batch).
    """
    batch = task.kind.collate(features, task, pad_token_id, pad_to_multiple_of, tokenizer)
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be right or left (got {padding_side!r})")
    return pad_left(batch) if padding_side == "left" else batch


def pad_left(batch: Batch) -> Batch:
    """A right-padded batch padded on the left instead: each row of every token-aligned tensor
    ``(rows, seq_len, ...)`` (``input_ids``, ``attention_mask``, ``token_type_ids``, token-aligned ``head_inputs``
    and labels) is rolled right by its padding, ``seq_len - attention_mask[row].sum()``."""
    mask = batch.attention_mask
    rows, seq_len = mask.shape
    shift = seq_len - mask.sum(1)
    index = (torch.arange(seq_len).unsqueeze(0) - shift.unsqueeze(1)) % seq_len  # (rows, seq_len): source column

    def roll(value):
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (rows, seq_len):
            gather = index.view(rows, seq_len, *([1] * (value.dim() - 2))).expand_as(value)
            return value.gather(1, gather)
        if isinstance(value, dict):
            return {k: roll(v) for k, v in value.items()}
        return value

    return dataclasses.replace(batch, **{f.name: roll(getattr(batch, f.name)) for f in dataclasses.fields(batch)})
