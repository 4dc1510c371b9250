"""The sentence-level task types: classification, regression and ranking (one class each).

Per type: the rules of its definition, how a row becomes an :class:`~mtdnn.tasks.rows.Example` and its label
is parsed, how examples are tokenized (this module, no torch), how they are padded into batches
(:mod:`.batches`) and how head outputs are read back (:mod:`.outputs`: their shape, what the metrics compare, the
predictions written by ``mtdnn.predict``). The classes import those two modules when first called, which keeps
torch out of import time.

Shapes: a batch of n examples has ``input_ids``/``attention_mask``/``token_type_ids`` ``(n, seq_len)`` int64,
or ``(n * k, seq_len)`` for ranking with k candidates per group; ``labels`` ``(n,)`` (int64 class or candidate
index, float32 score). Head outputs: logits ``(n, classes)``, scores ``(n,)``, candidate scores ``(n, k)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...fileio import parse_decimal, parse_integer
from ...tasks.rows import Example
from ...tasks.types import HfModel, TaskKind

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef


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


# ------------------------------------------------------------------------------------------------ the types


class SentenceType(TaskKind):
    """What the sentence-level types share: one or two ``text`` columns, no ``masking``, rows of a table, the
    linear head, one output row per example. Subclasses say whether the type has ``candidates``."""

    label_dtype = "int64"  # of ``labels`` in a batch

    def check(self, task: TaskDef) -> None:
        """The rules every sentence-level type shares: one or two ``text`` columns (a ranking task may have none:
        each candidate is then scored alone), no ``masking``; and only ranking tasks have ``candidates``. Raises
        ValueError."""
        if len(task.text) > 2 or (not task.text and not self.ranks_candidates):
            raise ValueError(f"field 'text': needs one column (single sentence) or two (premise, hypothesis) "
                             f"(got {task.text})")
        if task.masking is not None:
            raise ValueError(f"field 'masking': only for mlm tasks, not {task.type}")
        if task.candidates is not None and not self.ranks_candidates:
            raise ValueError(f"field 'candidates': only for ranking tasks, not {task.type}")

    def make_examples(self, task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
        """One example of the ``text`` columns: a single sentence, or a (premise, hypothesis) pair."""
        return pair_examples(task, row, line)

    def tokenize(self, examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """See :func:`tokenize_pairs`."""
        return tokenize_pairs(examples, task, tokenizer, max_length)

    def build_head(self, task: TaskDef, encoder):
        """The linear head on the pooled output (:class:`mtdnn.modeling.heads.TaskHead`)."""
        from ...modeling.heads import linear_head  # keeps torch out of import time

        return linear_head(task, encoder)

    def collate(self, features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None):
        """Pad the items into a batch (:func:`.batches.collate_sentences`); the tokenizer is unused."""
        import torch  # keeps torch out of import time

        from .batches import collate_sentences  # keeps torch out of import time

        return collate_sentences(features, task, pad_token_id, pad_to_multiple_of, self.ranks_candidates,
                                 getattr(torch, self.label_dtype))

    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """Predicted and gold ids ``(n,)`` of weight > 0 examples (:func:`.outputs.argmax`)."""
        from .outputs import argmax  # keeps torch out of import time

        return argmax(outputs, labels, weight)


class Classification(SentenceType):
    """``type: classification``: a class of ``labels`` per single sentence or pair; linear or SAN head."""

    name = "classification"
    heads = ("linear", "san")
    losses = ("cross_entropy",)
    metrics = ("accuracy", "f1", "mcc")
    default_metrics = ("accuracy",)
    soft_targets = "probabilities"
    classifies = True
    hf_model = HfModel("AutoModelForSequenceClassification", "linear", "labels", "text-classification",
                       "single_label_classification")

    def output_names(self, task: TaskDef) -> list[str] | None:
        """The label names."""
        return list(task.labels)

    def check(self, task: TaskDef) -> None:
        """A classification task needs at least two distinct ``labels``; raises ValueError."""
        super().check(task)
        if not task.labels or len(task.labels) < 2:
            raise ValueError(f"field 'labels': a classification task needs at least two label names (got {task.labels})")
        if len(set(task.labels)) != len(task.labels):
            raise ValueError(f"field 'labels': has duplicates: {task.labels}")
        if task.head.type == "san" and len(task.text) != 2:
            raise ValueError(f"field 'head.type': head type 'san' needs a text pair (text: [premise, hypothesis]); "
                             f"this task has one text column {task.text}: use the linear head")

    def parse_label(self, task: TaskDef, value: str) -> int:
        """See :func:`parse_class`."""
        return parse_class(task, value)

    def num_outputs(self, task: TaskDef) -> int:
        """One logit per class."""
        return len(task.labels)

    def output_width(self, task: TaskDef) -> int:
        """The classes."""
        return len(task.labels)

    def head_outputs(self, task: TaskDef, x):
        """The linear head's ``(n, classes)`` as they are: logits."""
        return x

    def decode(self, task: TaskDef, outputs) -> list[dict]:
        """``{"prediction": label name, "probability": p, "probabilities": {label: p}}`` with p = softmax(logits)."""
        from .outputs import decode_classes  # keeps torch out of import time

        return decode_classes(task, outputs)

    def build_head(self, task: TaskDef, encoder):
        """The linear head on the pooled output (:class:`mtdnn.modeling.heads.TaskHead`), or SAN
        (:class:`mtdnn.modeling.san.SanHead`)."""
        from ...modeling.heads import linear_head  # keeps torch out of import time
        from ...modeling.san import san_head

        return san_head(task, encoder) if task.head_type == "san" else linear_head(task, encoder)

    def loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.cross_entropy`."""
        from ...modeling.losses import cross_entropy  # keeps torch out of import time

        return cross_entropy

    def distillation_loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.distillation_cross_entropy`."""
        from ...modeling.losses import distillation_cross_entropy  # keeps torch out of import time

        return distillation_cross_entropy


class Regression(SentenceType):
    """``type: regression``: a score per single sentence or pair (STS-B)."""

    name = "regression"
    heads = ("linear",)
    losses = ("mse",)
    metrics = ("pearson", "spearman")
    default_metrics = ("pearson", "spearman")
    soft_targets = "mean"
    label_dtype = "float32"
    predicts_scores = True
    hf_model = HfModel("AutoModelForSequenceClassification", "linear", "score", "text-classification", "regression")

    def parse_label(self, task: TaskDef, value: str) -> float:
        """See :func:`parse_score`."""
        return parse_score(task, value)

    def num_outputs(self, task: TaskDef) -> int:
        """One score."""
        return 1

    def output_width(self, task: TaskDef) -> int:
        """One score."""
        return 1

    def head_outputs(self, task: TaskDef, x):
        """A linear head's ``(n, 1)`` -> scores ``(n,)``."""
        return x.squeeze(-1)

    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """Predicted and gold scores in float64 (:func:`.outputs.as_scores`)."""
        from .outputs import as_scores  # keeps torch out of import time

        return as_scores(outputs, labels, weight)

    def decode(self, task: TaskDef, outputs) -> list[dict]:
        """``{"prediction": score}``."""
        return [{"prediction": float(s)} for s in outputs.tolist()]


    def loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.mse`."""
        from ...modeling.losses import mse  # keeps torch out of import time

        return mse

    def distillation_loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.distillation_mse`."""
        from ...modeling.losses import distillation_mse  # keeps torch out of import time

        return distillation_mse


class Ranking(SentenceType):
    """``type: ranking``: the correct one of k ``candidates`` columns, each scored against the text (MT-DNN's
    pairwise ranking, arXiv 1901.11504 section 3)."""

    name = "ranking"
    heads = ("linear",)
    losses = ("ranking_cross_entropy",)
    no_hf_model = ("one score per candidate of a group, which *ForSequenceClassification (one sequence, fixed "
                   "labels) cannot express")
    metrics = ("accuracy",)
    default_metrics = ("accuracy",)
    soft_targets = "probabilities"
    ranks_candidates = True

    def output_names(self, task: TaskDef) -> list[str] | None:
        """The candidate columns."""
        return list(task.candidates)

    def check(self, task: TaskDef) -> None:
        """A ranking task needs at least two ``candidates`` columns; raises ValueError."""
        super().check(task)
        if not task.candidates or len(task.candidates) < 2:
            raise ValueError(f"field 'candidates': a ranking task needs at least two columns (got {task.candidates})")

    def encodes_pairs(self, task: TaskDef) -> bool:
        """Always: (context, candidate)."""
        return True

    def make_examples(self, task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
        """See :func:`ranking_examples`."""
        return ranking_examples(task, row, line)

    def parse_label(self, task: TaskDef, value: str) -> int:
        """See :func:`parse_candidate`."""
        return parse_candidate(task, value)

    def tokenize(self, examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """See :func:`tokenize_ranking`."""
        return tokenize_ranking(examples, task, tokenizer, max_length)

    def num_outputs(self, task: TaskDef) -> int:
        """One score per (context, candidate) sequence."""
        return 1

    def output_width(self, task: TaskDef) -> int:
        """The candidates."""
        return task.num_candidates

    def head_outputs(self, task: TaskDef, x):
        """A linear head's ``(n * k, 1)`` -> candidate scores ``(n, k)`` (MT-DNN's ranking head, arXiv 1901.11504 eq. 3)."""
        return x.view(-1, task.num_candidates)

    def decode(self, task: TaskDef, outputs) -> list[dict]:
        """The chosen candidate's index, with the softmax over the group keyed by candidate column."""
        from .outputs import decode_candidates  # keeps torch out of import time

        return decode_candidates(task, outputs)

    def loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.ranking_cross_entropy`."""
        from ...modeling.losses import ranking_cross_entropy  # keeps torch out of import time

        return ranking_cross_entropy

    def distillation_loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.losses.distillation_cross_entropy` over the candidates."""
        from ...modeling.losses import distillation_cross_entropy  # keeps torch out of import time

        return distillation_cross_entropy
