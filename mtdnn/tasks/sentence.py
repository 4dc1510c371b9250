"""The data side of the sentence-level task types: classification, regression and ranking.

Per type: the rules of its definition, how a row becomes an :class:`~mtdnn.tasks.rows.Example` and its label
is parsed, how examples are tokenized and padded into batches, and how head outputs are read back (what the
metrics compare, the predictions written by ``mtdnn.predict``). :mod:`mtdnn.tasks.types` registers these
functions under each type's name.

Shapes: a batch of n examples has ``input_ids``/``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64,
or ``(n * k, seq_len)`` for ranking with k candidates per group; ``labels`` ``(n,)`` (int64 class or candidate
index, float32 score). Head outputs: logits ``(n, classes)``, scores ``(n,)``, candidate scores ``(n, k)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..fileio import parse_decimal, parse_integer
from .rows import Example, attention_mask, pad

if TYPE_CHECKING:
    from .taskdef import TaskDef


# ------------------------------------------------------------------------------------------------ definitions


def no_candidates(task: TaskDef) -> None:
    """The rules every sentence-level type shares: one or two ``text`` columns (a ranking task may have none:
    each candidate is then scored alone), no ``masking``; and only ranking tasks have ``candidates``. Raises
    ValueError."""
    if len(task.text) > 2 or (not task.text and task.type != "ranking"):
        raise ValueError(f"field 'text': needs one column (single sentence) or two (premise, hypothesis) "
                         f"(got {task.text})")
    if task.masking is not None:
        raise ValueError(f"field 'masking': only for mlm tasks, not {task.type}")
    if task.candidates is not None and task.type != "ranking":
        raise ValueError(f"field 'candidates': only for ranking tasks, not {task.type}")


def check_classification(task: TaskDef) -> None:
    """A classification task needs at least two distinct ``labels``; raises ValueError."""
    no_candidates(task)
    if not task.labels or len(task.labels) < 2:
        raise ValueError(f"field 'labels': a classification task needs at least two label names (got {task.labels})")
    if len(set(task.labels)) != len(task.labels):
        raise ValueError(f"field 'labels': has duplicates: {task.labels}")
    if task.head.type == "san" and len(task.text) != 2:
        raise ValueError(f"field 'head.type': head type 'san' needs a text pair (text: [premise, hypothesis]); "
                         f"this task has one text column {task.text}: use the linear head")


def check_regression(task: TaskDef) -> None:
    """Regression has no type-specific fields (and no ``candidates``)."""
    no_candidates(task)


def check_ranking(task: TaskDef) -> None:
    """A ranking task needs at least two ``candidates`` columns; raises ValueError."""
    no_candidates(task)
    if not task.candidates or len(task.candidates) < 2:
        raise ValueError(f"field 'candidates': a ranking task needs at least two columns (got {task.candidates})")


# ------------------------------------------------------------------------------------------------ parsing


def parse_class(task: TaskDef, value: str) -> int:
    """A class name of ``task.labels`` or its 0-based id (an integer of the number grammar,
    :func:`mtdnn.fileio.parse_integer`); raises ValueError naming the valid values."""
    value = value.strip()
    assert task.labels is not None
    if value in task.labels:
        return task.labels.index(value)
    number = parse_integer(value)
    if number is not None and 0 <= number < len(task.labels):
        return number
    raise ValueError(f"not a label of this task (labels: {', '.join(task.labels)}, or their ids 0..{len(task.labels) - 1})")


def parse_score(task: TaskDef, value: str) -> float:
    """A finite number of the data files' number grammar (:func:`mtdnn.fileio.parse_decimal`: no ``1_0``, no
    ``nan`` or ``inf``); raises ValueError."""
    return parse_decimal(value)


def parse_candidate(task: TaskDef, value: str) -> int:
    """The 0-based index of the correct candidate (an integer of the number grammar); raises ValueError."""
    k = task.num_candidates
    number = parse_integer(value)
    if number is not None and 0 <= number < k:
        return number
    raise ValueError(f"not a candidate index 0..{k - 1}")


def pair_examples(task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
    """One example of the ``text`` columns: a single sentence, or a (premise, hypothesis) pair."""
    texts = [row[c] for c in task.text]
    return [Example(id="", line=line, text_a=texts[0], text_b=texts[1] if len(texts) > 1 else None)]


def ranking_examples(task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
    """One example: the ``text`` columns joined with a space as context, the ``candidates`` columns' texts."""
    return [Example(id="", line=line, text_a=" ".join(row[c] for c in task.text),
                    candidates=[row[c] for c in task.candidates or []])]


# ------------------------------------------------------------------------------------------------ tokenization


def _kwargs(tokenizer, max_length: int) -> tuple[dict, bool]:
    use_types = "token_type_ids" in tokenizer.model_input_names
    return dict(truncation=True, max_length=max_length, return_attention_mask=False,
                return_token_type_ids=use_types), use_types


def tokenize_pairs(examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """``tokenizer(text_a, text_b)`` per example (segment ids where the tokenizer has them), truncated.

    Returns columns ``input_ids`` (``list[int]`` per example), ``length`` and, when the tokenizer uses them,
    ``token_type_ids``. With a SAN head (``head.type: san``) also ``sequence_ids``: per token 0 (premise),
    1 (hypothesis) or -1 (special tokens), from the fast tokenizer's ``sequence_ids``, so that SAN finds the
    two texts' tokens in encoders without token-type ids too.
    """
    kwargs, use_types = _kwargs(tokenizer, max_length)
    seconds = [ex.text_b for ex in examples] if task.text[1:] else None
    enc = tokenizer([ex.text_a for ex in examples], seconds, **kwargs)
    columns = {"input_ids": enc["input_ids"], "length": [len(s) for s in enc["input_ids"]]}
    if use_types:
        columns["token_type_ids"] = enc["token_type_ids"]
    if task.head.type == "san":
        columns["sequence_ids"] = [[-1 if s is None else s for s in enc.sequence_ids(i)] for i in range(len(examples))]
    return columns


def tokenize_ranking(examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """``tokenizer(context, candidate)`` for each of the k candidates: ``input_ids`` is a list of k sequences
    per example, ``length`` the longest of them."""
    kwargs, use_types = _kwargs(tokenizer, max_length)
    k = task.num_candidates
    firsts = [ex.text_a for ex in examples for _ in range(k)]
    seconds = [c for ex in examples for c in ex.candidates or []]
    enc = tokenizer(firsts, seconds, **kwargs)
    group = lambda seq: [seq[i * k:(i + 1) * k] for i in range(len(examples))]  # noqa: E731
    input_ids = group(enc["input_ids"])
    columns = {"input_ids": input_ids, "length": [max(len(s) for s in g) for g in input_ids]}
    if use_types:
        columns["token_type_ids"] = group(enc["token_type_ids"])
    return columns


# ------------------------------------------------------------------------------------------------ batching


def _collate(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int,
             grouped: bool, label_dtype: torch.dtype) -> dict:  # the tokenizer argument of the collates is unused
    flat = (lambda key: [s for f in features for s in f[key]]) if grouped else (lambda key: [f[key] for f in features])
    seqs = flat("input_ids")
    input_ids = pad(seqs, pad_token_id, pad_to_multiple_of)
    batch = {"task": task.name, "input_ids": input_ids, "attention_mask": attention_mask(seqs, input_ids.shape[1]),
             "idx": torch.tensor([f["idx"] for f in features], dtype=torch.long),
             "weight": torch.tensor([f.get("weight", 1.0) for f in features], dtype=torch.float32)}
    if "token_type_ids" in features[0]:
        batch["token_type_ids"] = pad(flat("token_type_ids"), 0, pad_to_multiple_of)
    if "sequence_ids" in features[0]:
        batch["head_inputs"] = {"sequence_ids": pad(flat("sequence_ids"), -1, pad_to_multiple_of)}
    if "label" in features[0]:
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=label_dtype)
    return batch


def collate_classification(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int,
                           pad_to_multiple_of: int = 1, tokenizer=None) -> dict:
    """Pad single sentences or pairs; ``labels`` int64 class ids. A SAN task's ``sequence_ids`` go to
    ``head_inputs`` (``(n, seq_len)``, padded with -1)."""
    return _collate(features, task, pad_token_id, pad_to_multiple_of, False, torch.long)


def collate_regression(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int,
                       pad_to_multiple_of: int = 1, tokenizer=None) -> dict:
    """Pad single sentences or pairs; ``labels`` float32 scores."""
    return _collate(features, task, pad_token_id, pad_to_multiple_of, False, torch.float32)


def collate_ranking(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int,
                    pad_to_multiple_of: int = 1, tokenizer=None) -> dict:
    """Flatten each group's k (context, candidate) sequences into ``(n * k, seq_len)``; ``labels`` int64."""
    return _collate(features, task, pad_token_id, pad_to_multiple_of, True, torch.long)


# ------------------------------------------------------------------------------------------------ outputs


def class_outputs(task: TaskDef, x: torch.Tensor) -> torch.Tensor:
    """A linear head's ``(n, classes)`` as they are: logits."""
    return x


def score_outputs(task: TaskDef, x: torch.Tensor) -> torch.Tensor:
    """A linear head's ``(n, 1)`` -> scores ``(n,)``."""
    return x.squeeze(-1)


def group_outputs(task: TaskDef, x: torch.Tensor) -> torch.Tensor:
    """A linear head's ``(n * k, 1)`` -> candidate scores ``(n, k)`` (MT-DNN's ranking head, arXiv 1901.11504 eq. 3)."""
    return x.view(-1, task.num_candidates)


def argmax(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What classification and ranking metrics compare: predicted and gold ids ``(n,)`` of weight > 0 examples."""
    keep = weight > 0
    return outputs.argmax(-1)[keep], labels[keep]


def as_scores(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What regression metrics compare: predicted and gold scores ``(n,)`` of weight > 0 examples, in float64
    (except on MPS, which has none): torchmetrics merges Pearson's running moments across DDP ranks, and in
    float32 that merge alone moves the result by ~1e-6."""
    keep = weight > 0
    preds, labels = outputs.float()[keep], labels[keep]
    if preds.device.type != "mps":
        preds, labels = preds.double(), labels.double()
    return preds, labels


def decode_classes(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """``{"prediction": label name, "probability": p, "probabilities": {label: p}}`` with p = softmax(logits)."""
    return _decode(outputs, task.labels, lambda i: task.labels[i])


def decode_candidates(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """The chosen candidate's index, with the softmax over the group keyed by candidate column."""
    return _decode(outputs, task.candidates, lambda i: i)


def decode_scores(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """``{"prediction": score}``."""
    return [{"prediction": float(s)} for s in outputs.tolist()]


def _decode(outputs: torch.Tensor, names, prediction) -> list[dict]:
    assert names is not None
    probs = outputs.float().softmax(-1)
    best = probs.argmax(-1).tolist()
    return [{"prediction": prediction(i), "probability": p[i], "probabilities": dict(zip(names, p))}
            for i, p in zip(best, probs.tolist())]
