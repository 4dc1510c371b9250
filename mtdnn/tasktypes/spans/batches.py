"""Batches of span extraction (windows of a question and its context).

Items are rows of a tokenized split (see :mod:`.features` for their columns). A batch of n windows has
``input_ids``/``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64 (right padding), ``idx`` ``(n,)`` the
windows' rows in the split, ``weight`` ``(n,)`` (0 marks a DDP padding copy) and, when labelled, ``labels``
``(n, 3)``: the gold start and end piece of each window and the window's row in the split (``idx``), by which span
metrics find the window's offsets and question.
"""

from __future__ import annotations

from typing import Any

import torch

from ...tasks.padding import piece_batch


def collate_spans(features: list[dict[str, Any]], task_name: str, pad_token_id: int,
                  pad_to_multiple_of: int = 1) -> dict:
    """A span-extraction batch of windows (see the module docstring)."""
    batch = piece_batch(features, task_name, pad_token_id, pad_to_multiple_of)
    if "label" in features[0]:
        batch["labels"] = torch.tensor([[*f["label"], f["idx"]] for f in features], dtype=torch.long)
    return batch
