"""Batches of sequence labelling (:class:`TaggingBatch`), and what its metrics compare.

Items are rows of a tokenized split (see :mod:`.features` for their columns)."""

from __future__ import annotations

from typing import Any

import torch

from ...tasks.batch import Batch
from ...tasks.padding import pad_to, piece_fields
from ...tasks.rows import IGNORE


class TaggingBatch(Batch):
    """A batch of n sentences (see :class:`~mtdnn.tasks.batch.Batch` for the shared fields): ``input_ids``/
    ``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64 (right padding) and, when labelled, ``labels``
    ``(n, seq_len)`` int64 piece labels (-100 where ignored: pieces after a word's first, special tokens, padding)."""


def collate_tagging(features: list[dict[str, Any]], task_name: str, pad_token_id: int,
                    pad_to_multiple_of: int = 1) -> TaggingBatch:
    """A sequence-labelling batch (see :class:`TaggingBatch`)."""
    batch = TaggingBatch(**piece_fields(features, task_name, pad_token_id, pad_to_multiple_of))
    if "piece_labels" in features[0]:
        batch.labels = pad_to([f["piece_labels"] for f in features], IGNORE, batch.input_ids.shape[1])
    return batch


def first_piece_tags(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[list, list]:
    """What entity metrics compare: per real sentence, the predicted and gold tag ids of its labelled pieces
    (each word's first piece), as Hugging Face ``run_ner`` scores them. ``outputs`` ``(n, seq_len, tags)``,
    ``labels`` ``(n, seq_len)``, ``weight`` ``(n,)``."""
    predicted, gold = [], []
    preds = outputs.argmax(-1).tolist()
    for row, (p, g) in enumerate(zip(preds, labels.tolist())):
        if weight[row] > 0:
            gold.append([t for t in g if t != IGNORE])
            predicted.append([t for t, label in zip(p, g) if label != IGNORE])
    return predicted, gold
