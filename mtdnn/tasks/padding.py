"""Padding token sequences into tensors, shared by every task type's collate (see :mod:`mtdnn.tasktypes`)."""

from __future__ import annotations

from typing import Any, Sequence

import torch


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


def pad_to(sequences: Sequence[Sequence[int]], value: int, length: int) -> torch.Tensor:
    """Right-pad integer sequences into ``(len(sequences), length)`` int64 (``length`` >= the longest)."""
    out = torch.full((len(sequences), length), value, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def piece_fields(features: list[dict[str, Any]], task_name: str, pad_token_id: int, pad_to_multiple_of: int) -> dict:
    """The fields of :class:`~mtdnn.tasks.batch.Batch` every batch of word-piece rows has, as keyword arguments:
    ``task``, ``input_ids``/``attention_mask``/``token_type_ids``
    ``(n, seq_len)`` int64 (right padding, ``seq_len`` the longest row rounded up to ``pad_to_multiple_of``),
    ``idx`` ``(n,)`` the rows' positions in the split and ``weight`` ``(n,)`` float32 (0 marks a DDP padding copy)."""
    seqs = [f["input_ids"] for f in features]
    seq_len = -(-max(len(s) for s in seqs) // pad_to_multiple_of) * pad_to_multiple_of
    fields = {"task": task_name, "input_ids": pad_to(seqs, pad_token_id, seq_len),
             "attention_mask": pad_to([[1] * len(s) for s in seqs], 0, seq_len),
             "idx": torch.tensor([f["idx"] for f in features], dtype=torch.long),
             "weight": torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32)}
    if "token_type_ids" in features[0]:
        fields["token_type_ids"] = pad_to([f["token_type_ids"] for f in features], 0, seq_len)
    return fields
