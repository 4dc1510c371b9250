"""``type: mlm`` (class :class:`Mlm`): masked-language-model auxiliary tasks over the text columns of any split.

Each non-empty cell of the ``text`` columns is one text. Texts are tokenized without special tokens and packed,
in file order, into sequences of up to ``max_length`` tokens (RoBERTa's FULL-SENTENCES packing, arXiv 1907.11692
section 4.2; a text longer than a sequence is truncated), each wrapped in the tokenizer's special tokens. The
tokenized cache keeps, per sequence, the ``word_ids`` of its tokens (-1 for special tokens; words of different
texts never merge), which whole-word and span masking need. Masking happens when a batch is collated
(:mod:`.masking`; :mod:`.batches`), with a random stream per (seed, epoch, row): ``static`` masks and dev masks are
fixed by the seed; the others change every epoch.

A batch has ``input_ids`` (masked) and ``attention_mask`` ``(n, seq_len)``, ``labels`` ``(n, seq_len)``: the
original token where one is predicted, -100 elsewhere; ``head_inputs``: ``mlm_positions`` ``(n, seq_len)`` bool
(= labels != -100) and, with ``sbo: true``, ``span_boundaries`` ``(m, 2)`` (the token positions just left and
right of each predicted token's span) and ``span_offsets`` ``(m,)`` (its position inside the span), m the number
of predicted tokens, in row-major order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...tasks.rows import Example
from ...tasks.types import TaskKind

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef


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


class Mlm(TaskKind):
    """``type: mlm``: a masked-language-model auxiliary task. Unlabelled (its targets are the masked tokens), never
    selects the best epoch, has no linear head, no per-example width, no predictions and no soft targets."""

    name = "mlm"
    heads = ("mlm",)
    losses = ("mlm_cross_entropy",)
    pools = False
    no_hf_model = "an auxiliary masked-language-model head, trained beside the tasks, not a model to serve"
    metrics = ("masked_accuracy", "masked_loss")
    default_metrics = ("masked_accuracy", "masked_loss")
    labelled = False
    selected = False
    no_predictions = "it is trained alongside other tasks, and scored on dev by masked-token accuracy and loss"

    def check(self, task: TaskDef) -> None:
        """See :func:`check_mlm`."""
        check_mlm(task)

    def make_examples(self, task: TaskDef, row: dict[str, str], line: int) -> list[Example]:
        """See :func:`text_examples`."""
        return text_examples(task, row, line)

    def num_outputs(self, task: TaskDef) -> int:
        """None of the linear kind: the MLM head (:class:`mtdnn.modeling.mlm.MlmHead`) is vocabulary-sized."""
        return 0

    def build_head(self, task: TaskDef, encoder):
        """The MLM head tied to the encoder's input embeddings (:func:`mtdnn.modeling.mlm.mlm_head`)."""
        from ...modeling.mlm import mlm_head  # keeps torch out of import time

        return mlm_head(task, encoder)

    def loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.mlm.mlm_cross_entropy`."""
        from ...modeling.mlm import mlm_cross_entropy  # keeps torch out of import time

        return mlm_cross_entropy

    def tokenize(self, examples: list[Example], task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """See :func:`tokenize_packed`."""
        return tokenize_packed(examples, task, tokenizer, max_length)

    def collate(self, features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None):
        """Mask and pad (:func:`.batches.collate_mlm`)."""
        from .batches import collate_mlm  # keeps torch out of import time

        return collate_mlm(features, task, pad_token_id, pad_to_multiple_of, tokenizer)

    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """See :func:`.batches.masked_targets`."""
        from .batches import masked_targets  # keeps torch out of import time

        return masked_targets(outputs, labels, weight)
