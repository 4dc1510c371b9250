"""The typed batch: what a task type's collate builds and the module, the student and inference read.

Every batch holds one task's rows. :class:`Batch` has the fields all types share; each type's batch kind is a
subclass in its package that documents its own shapes (``labels``, ``head_inputs``):
:class:`mtdnn.tasktypes.sentence.batches.SentenceBatch`, :class:`mtdnn.tasktypes.mlm.batches.MlmBatch`,
:class:`mtdnn.tasktypes.tagging.batches.TaggingBatch`, :class:`mtdnn.tasktypes.spans.batches.SpanBatch`.

A batch is a plain (non-frozen) dataclass of tensors, Python ints, a string and a dict of tensors: it pickles
through DataLoader workers, Lightning's ``move_data_to_device`` moves it to a device field by field, and
:meth:`Batch.pin_memory` pins it for a loader with ``pin_memory=True``. No torch is imported here. Code reads
fields (``batch.labels``); a batch is not a mapping, so a misspelt field fails as an AttributeError.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class Batch:
    """One task's batch of n examples (rows: n, or n * k for a ranking group of k candidates).

    Attributes:
        task: the task's name.
        input_ids: ``(rows, seq_len)`` int64, padded (right, or left for tokenizers that pad on the left) to the
            longest row rounded up to ``pad_to_multiple_of`` (or a length bucket).
        attention_mask: ``(rows, seq_len)`` int64, 1 on tokens, 0 on padding.
        idx: ``(n,)`` int64, the examples' rows in the tokenized split.
        weight: ``(n,)`` float32; 0 masks an example out of loss and metrics (DDP padding copies).
        token_type_ids: ``(rows, seq_len)`` int64 segment ids, where the tokenizer has them.
        labels: the gold of a labelled split (shape per type); None when unlabelled.
        head_inputs: tensors the head needs beyond the encoder's output (SAN's ``sequence_ids``, MLM positions),
            keyword arguments of the head's forward; None when the type has none.
        examples: real (weight > 0) examples in this batch, counted on the host by the collator.
        global_examples: real examples of the whole optimizer step on all ranks (scheduled training batches).
        teacher_logits: the teacher members' outputs of a ``distill`` task's training batch, ``(n, members,
            outputs)`` float32 (per-piece types: ``(n, members, seq_len, width)``), added by the student's collator.
    """

    task: str
    input_ids: Tensor
    attention_mask: Tensor
    idx: Tensor
    weight: Tensor
    token_type_ids: Tensor | None = None
    labels: Tensor | None = None
    head_inputs: dict[str, Tensor] | None = None
    examples: int | None = None
    global_examples: int | None = None
    teacher_logits: Tensor | None = None

    @property
    def head_kwargs(self) -> dict[str, Tensor]:
        """``head_inputs``, or no keyword arguments."""
        return self.head_inputs or {}

    def pin_memory(self) -> "Batch":
        """The batch with every tensor in pinned memory (what ``DataLoader(pin_memory=True)`` calls)."""
        def pin(value):
            if hasattr(value, "pin_memory"):
                return value.pin_memory()
            if isinstance(value, dict):
                return {k: pin(v) for k, v in value.items()}
            return value
        return dataclasses.replace(self, **{f.name: pin(getattr(self, f.name)) for f in dataclasses.fields(self)})
