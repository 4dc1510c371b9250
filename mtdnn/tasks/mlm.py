"""The data side of ``type: mlm``: masked-language-model auxiliary tasks over the text columns of any split.

Each non-empty cell of the ``text`` columns is one text. Texts are tokenized without special tokens and packed,
in file order, into sequences of up to ``max_length`` tokens (RoBERTa's FULL-SENTENCES packing, arXiv 1907.11692
section 4.2; a text longer than a sequence is truncated), each wrapped in the tokenizer's special tokens. The
tokenized cache keeps, per sequence, the ``word_ids`` of its tokens (-1 for special tokens; words of different
texts never merge), which whole-word and span masking need. Masking happens when a batch is collated
(:mod:`mtdnn.tasks.masking`), with a random stream per (seed, epoch, row): ``static`` masks and dev masks are
fixed by the seed; the others change every epoch.

A batch has ``input_ids`` (masked) and ``attention_mask`` ``(n, seq_len)``, ``labels`` ``(n, seq_len)``: the
original token where one is predicted, -100 elsewhere; ``head_inputs``: ``mlm_positions`` ``(n, seq_len)`` bool
(= labels != -100) and, with ``sbo: true``, ``span_boundaries`` ``(m, 2)`` (the token positions just left and
right of each predicted token's span) and ``span_offsets`` ``(m,)`` (its position inside the span), m the number
of predicted tokens, in row-major order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import ConfigError
from .masking import IGNORE, mask_sequence, rng_for
from .rows import Example, attention_mask, pad

if TYPE_CHECKING:
    from .taskdef import TaskDef


def check_mlm(task: TaskDef) -> None:
    """An mlm task names one or more ``text`` columns and nothing a labelled task has; raises ValueError."""
    if not task.text:
        raise ValueError("an mlm task needs 'text': one or more text columns to mask (e.g. text: [sentence1, "
                         "sentence2])")
    for name in ("label", "labels", "candidates", "drop_labels"):
        if getattr(task, name) is not None:
            raise ValueError(f"'{name}' is not a field of an mlm task (its targets are the masked tokens)")
    masking = task.masking_spec
    if masking.sbo and masking.strategy != "span":
        raise ValueError(f"masking.sbo (the span boundary objective) needs strategy: span, not {masking.strategy}")


def text_examples(task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
    """One example per non-empty text cell of the row."""
    return [Example(id="", line=line, text_a=row[c]) for c in task.text if row[c].strip()]


def tokenize_packed(examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """Pack the texts into sequences of at most ``max_length`` tokens (see the module docstring).

    Returns columns ``id`` (the sequence's position), ``input_ids``, ``length`` and ``word_ids``.
    """
    prefix, suffix = special_tokens_around(tokenizer)
    capacity = max_length - len(prefix) - len(suffix)
    enc = tokenizer([ex.text_a for ex in examples], add_special_tokens=False, truncation=True,
                    max_length=capacity, return_attention_mask=False, return_token_type_ids=False)
    sequences: list[tuple[list[int], list[int]]] = []
    ids: list[int] = []
    words: list[int] = []
    for i, text_ids in enumerate(enc["input_ids"]):
        if ids and len(ids) + len(text_ids) > capacity:
            sequences.append((ids, words))
            ids, words = [], []
        offset = words[-1] + 1 if words else 0
        ids += text_ids
        words += [offset + w for w in enc.word_ids(i)]
    if ids:
        sequences.append((ids, words))
    columns: dict[str, list] = {"id": [], "input_ids": [], "length": [], "word_ids": []}
    for k, (ids, words) in enumerate(sequences):
        columns["id"].append(str(k))
        columns["input_ids"].append(prefix + ids + suffix)
        columns["length"].append(len(prefix) + len(ids) + len(suffix))
        columns["word_ids"].append([-1] * len(prefix) + words + [-1] * len(suffix))
    return columns


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a single text (BERT: [CLS] / [SEP]; RoBERTa:
    <s> / </s>; XLNet: nothing / <sep> <cls>), read from how it encodes a one-word text."""
    probe = tokenizer("a", add_special_tokens=True, return_attention_mask=False, return_token_type_ids=False)
    text = [i for i, s in enumerate(probe.sequence_ids(0)) if s == 0]
    return probe["input_ids"][:text[0]], probe["input_ids"][text[-1] + 1:]


def collate_mlm(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None) -> dict:
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
    return {"task": task.name, "input_ids": input_ids,
            "attention_mask": attention_mask([f["input_ids"] for f in features], input_ids.shape[1]),
            "idx": torch.tensor([f["idx"] for f in features], dtype=torch.long),
            "weight": torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32),
            "labels": labels, "head_inputs": head_inputs}


def masked_targets(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What the MLM metrics compare: the MLM logits ``(m, vocab)`` of the predicted tokens of weight > 0 rows and
    their original tokens ``(m,)``. ``outputs`` is ``(m, vocab)``, or ``(m, 2, vocab)`` with SBO (MLM first)."""
    logits = outputs[:, 0] if outputs.dim() == 3 else outputs
    predicted = labels != IGNORE
    rows = predicted.nonzero()[:, 0]
    keep = weight[rows] > 0
    return logits[keep], labels[predicted][keep]


def no_decode(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """MLM tasks train the encoder; they have no predictions to write. Raises ConfigError."""
    raise ConfigError(f"task '{task.name}' is an mlm task: it has no predictions (it is trained alongside other "
                     "tasks, and scored on dev by masked-token accuracy and loss)")


def no_width(task: TaskDef) -> int:
    """MLM outputs are vocabulary-sized, per predicted token; there is no per-example width. Raises ValueError."""
    raise ValueError(f"task '{task.name}' is an mlm task: its outputs have no per-example width")


def no_head_outputs(task: TaskDef, x: torch.Tensor) -> torch.Tensor:
    """MLM has its own head (:class:`mtdnn.modeling.mlm.MlmHead`), not the linear one. Raises ValueError."""
    raise ValueError(f"task '{task.name}' is an mlm task: it has no linear head")
