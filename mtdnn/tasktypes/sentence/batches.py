"""Batches of the sentence-level types: single sentences, pairs, or a ranking group's k (context, candidate) pairs
(:class:`SentenceBatch`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ...tasks.batch import Batch
from ...tasks.padding import attention_mask, pad

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef


class SentenceBatch(Batch):
    """A batch of n sentence-level examples (see :class:`~mtdnn.tasks.batch.Batch` for the shared fields).

    ``input_ids``/``attention_mask``/``token_type_ids`` are ``(n, seq_len)`` int64, or ``(n * k, seq_len)`` for
    ranking with k candidates per group (group i's candidates are rows ``i * k .. i * k + k - 1``); ``labels``
    ``(n,)``: int64 class or candidate index, float32 score; ``head_inputs`` with a SAN head: ``sequence_ids``
    ``(n, seq_len)`` int64, per token 0 (premise), 1 (hypothesis) or -1 (special tokens and padding).
    """


def collate_sentences(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int,
                      grouped: bool, label_dtype: torch.dtype) -> SentenceBatch:
    """Pad single sentences or pairs (``grouped``: each item's k sequences flattened, ranking) into a batch;
    ``labels`` of ``label_dtype``. A SAN task's ``sequence_ids`` go to ``head_inputs`` (``(n, seq_len)``, padded
    with -1)."""
    flat = (lambda key: [s for f in features for s in f[key]]) if grouped else (lambda key: [f[key] for f in features])
    seqs = flat("input_ids")
    input_ids = pad(seqs, pad_token_id, pad_to_multiple_of)
    batch = SentenceBatch(task=task.name, input_ids=input_ids, attention_mask=attention_mask(seqs, input_ids.shape[1]),
                          idx=torch.tensor([f["idx"] for f in features], dtype=torch.long),
                          weight=torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32))
    if "token_type_ids" in features[0]:
        batch.token_type_ids = pad(flat("token_type_ids"), 0, pad_to_multiple_of)
    if "sequence_ids" in features[0]:
        batch.head_inputs = {"sequence_ids": pad(flat("sequence_ids"), -1, pad_to_multiple_of)}
    if "label" in features[0]:
        batch.labels = torch.tensor([f["label"] for f in features], dtype=label_dtype)
    return batch
