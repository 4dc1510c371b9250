"""Batches of the token-level task types: padding of piece labels, word maps and QA answer positions.

Items are rows of a tokenized split (see :mod:`mtdnn.tasks.token_features` for their columns). A batch of n
rows has ``input_ids``/``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64 (right padding), ``idx``
``(n,)`` the rows' positions in the split, ``weight`` ``(n,)`` (0 marks a DDP padding copy) and:

- sequence labelling: when labelled ``labels`` ``(n, seq_len)``, piece labels (-100 where ignored: pieces after
  a word's first, special tokens, padding);
- span extraction: when labelled ``labels`` ``(n, 3)``: the gold start and end piece of each window and the
  window's row in the split (``idx``), by which span metrics find the window's offsets and question.
"""

from __future__ import annotations

from typing import Any

import torch

from .token_features import IGNORE


def _pad(sequences: list[list[int]], value: int, length: int) -> torch.Tensor:
    out = torch.full((len(sequences), length), value, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def _common(features: list[dict[str, Any]], task_name: str, pad_token_id: int, pad_to_multiple_of: int) -> dict:
    seqs = [f["input_ids"] for f in features]
    seq_len = -(-max(len(s) for s in seqs) // pad_to_multiple_of) * pad_to_multiple_of
    batch = {"task": task_name, "input_ids": _pad(seqs, pad_token_id, seq_len),
             "attention_mask": _pad([[1] * len(s) for s in seqs], 0, seq_len),
             "idx": torch.tensor([f["idx"] for f in features], dtype=torch.long),
             "weight": torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32)}
    if "token_type_ids" in features[0]:
        batch["token_type_ids"] = _pad([f["token_type_ids"] for f in features], 0, seq_len)
    return batch


def collate_tagging(features: list[dict[str, Any]], task_name: str, pad_token_id: int,
                    pad_to_multiple_of: int = 1) -> dict:
    """A sequence-labelling batch (see the module docstring)."""
    batch = _common(features, task_name, pad_token_id, pad_to_multiple_of)
    if "piece_labels" in features[0]:
        batch["labels"] = _pad([f["piece_labels"] for f in features], IGNORE, batch["input_ids"].shape[1])
    return batch


def collate_spans(features: list[dict[str, Any]], task_name: str, pad_token_id: int,
                  pad_to_multiple_of: int = 1) -> dict:
    """A span-extraction batch of windows (see the module docstring)."""
    batch = _common(features, task_name, pad_token_id, pad_to_multiple_of)
    if "label" in features[0]:
        batch["labels"] = torch.tensor([[*f["label"], f["idx"]] for f in features], dtype=torch.long)
    return batch
