"""Batches of ``type: mlm`` (:class:`MlmBatch`): masking (:mod:`.masking`) at collation, and what the MLM metrics
compare."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ...errors import ConfigError
from ...tasks.batch import Batch
from ...tasks.padding import attention_mask, pad
from .masking import IGNORE, mask_sequence, rng_for

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef


class MlmBatch(Batch):
    """A batch of n packed sequences (see :class:`~mtdnn.tasks.batch.Batch` for the shared fields).

    ``input_ids`` (masked) and ``attention_mask`` ``(n, seq_len)``; ``labels`` ``(n, seq_len)``: the original token
    where one is predicted, -100 elsewhere; ``head_inputs``: ``mlm_positions`` ``(n, seq_len)`` bool (= labels !=
    -100) and, with ``sbo: true``, ``span_boundaries`` ``(m, 2)`` (the positions just left and right of each
    predicted token's span) and ``span_offsets`` ``(m,)`` (its position inside the span), m the predicted tokens in
    row-major order.
    """


def collate_mlm(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None) -> MlmBatch:
    """Mask and pad a batch (see the module docstring). An item's ``epoch`` (training) selects its mask for
    ``dynamic``, ``whole_word`` and ``span``; without one (dev), and for ``static``, the mask is fixed by the seed.

    Raises:
        ConfigError: no ``tokenizer`` given (its mask token and vocabulary are needed): the caller is not training
            (mlm tasks are scored by training's dev metrics only).
    """
    if tokenizer is None:
        raise ConfigError(f"task '{task.name}' is an mlm task: collating its batches needs the tokenizer (it is "
                          "trained and scored on dev during training, not by evaluate or predict)")
    spec = task.masking_spec
    special = set(tokenizer.all_special_ids)
    masked = []
    for f in features:
        epoch = None if spec.strategy == "static" else f.get("epoch")
        rng = rng_for(spec.seed, epoch, f["idx"])
        masked.append(mask_sequence(f["input_ids"], f["word_ids"], spec.strategy, spec.rate, rng,
                                    tokenizer.mask_token_id, len(tokenizer), special))
    input_ids = pad([m.input_ids for m in masked], pad_token_id, pad_to_multiple_of)
    labels = pad([m.labels for m in masked], IGNORE, pad_to_multiple_of)
    head_inputs = {"mlm_positions": labels != IGNORE}
    if spec.sbo:
        boundaries, offsets = [], []
        for m in masked:
            for start, end in m.spans:
                for i in range(start, end):
                    boundaries.append((start - 1, end))
                    offsets.append(i - start)
        head_inputs["span_boundaries"] = torch.tensor(boundaries, dtype=torch.long).view(-1, 2)
        head_inputs["span_offsets"] = torch.tensor(offsets, dtype=torch.long)
    return MlmBatch(task=task.name, input_ids=input_ids,
                    attention_mask=attention_mask([f["input_ids"] for f in features], input_ids.shape[1]),
                    idx=torch.tensor([f["idx"] for f in features], dtype=torch.long),
                    weight=torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32),
                    labels=labels, head_inputs=head_inputs)


def masked_targets(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What the MLM metrics compare: the MLM logits ``(m, vocab)`` of the predicted tokens of weight > 0 rows and
    their original tokens ``(m,)``. ``outputs`` is ``(m, vocab)``, or ``(m, 2, vocab)`` with SBO (MLM first)."""
    logits = outputs[:, 0] if outputs.dim() == 3 else outputs
    predicted = labels != IGNORE
    rows = predicted.nonzero()[:, 0]
    keep = weight[rows] > 0
    return logits[keep], labels[predicted][keep]
