"""Batches of span extraction (:class:`SpanBatch`: windows of a question and its context).

Items are rows of a tokenized split (see :mod:`.features` for their columns)."""

from __future__ import annotations

from typing import Any

import torch

from ...tasks.batch import Batch
from ...tasks.padding import piece_fields


class SpanBatch(Batch):
    """A batch of n windows (see :class:`~mtdnn.tasks.batch.Batch` for the shared fields): ``input_ids``/
    ``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64 (right padding), ``idx`` ``(n,)`` the windows' rows
    in the split and, when labelled, ``labels`` ``(n, 3)`` int64: the gold start and end piece of each window and
    the window's row in the split (``idx``), by which span metrics find the window's offsets and question."""


def collate_spans(features: list[dict[str, Any]], task_name: str, pad_token_id: int,
                  pad_to_multiple_of: int = 1) -> SpanBatch:
    """A span-extraction batch of windows (see :class:`SpanBatch`)."""
    batch = SpanBatch(**piece_fields(features, task_name, pad_token_id, pad_to_multiple_of))
    if "label" in features[0]:
        batch.labels = torch.tensor([[*f["label"], f["idx"]] for f in features], dtype=torch.long)
    return batch
