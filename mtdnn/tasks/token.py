"""The data side of the token-level task types: ``sequence_labelling`` and ``span_extraction``.

Per type, as :mod:`mtdnn.tasks.sentence` does for the sentence-level ones: the rules of its definition, how a
split's file is read (whole files, :mod:`mtdnn.tasks.conll` and :mod:`mtdnn.tasks.squad`, not rows of a
table), tokenization (:mod:`mtdnn.tasks.token_features`), batches (:mod:`mtdnn.tasks.token_batches`), and how
head outputs are read back. :mod:`mtdnn.tasks.types` registers these functions under each type's name.

Head outputs: sequence labelling ``(n, seq_len, tags)`` tag logits; span extraction ``(n, seq_len, 2)`` start
and end logits of each window (padding positions hold a large negative value). Outputs gathered over a split
(``mtdnn.training.inference.predict_outputs``) are padded to the longest row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import DataError
from ..fileio import quote_prefix
from .conll import check_tag_set, read_conll
from .rows import LABELLED_SPLITS
from .squad import read_squad
from .token_batches import collate_spans, collate_tagging
from .token_features import IGNORE, check_window_settings, stride_fits, tokenize_qa, tokenize_sentences

if TYPE_CHECKING:
    from .taskdef import TaskDef

MASKED = -1e4  # padding value of span logits (as mtdnn.modeling.token_heads.MASKED)
TAGGING_METRICS = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")
SPAN_METRICS = ("squad_f1", "exact_match")


# ------------------------------------------------------------------------------------------------ definitions


def check_sequence_labelling(task: TaskDef) -> None:
    """One ``text`` column (the token), a ``label`` column (the tag), ``labels`` a BIO tag set, and every file
    split in the ``conll`` format; raises ValueError."""
    if task.candidates is not None:
        raise ValueError("'candidates' is only for ranking tasks, not sequence_labelling")
    if len(task.text) != 1:
        raise ValueError(f"a sequence_labelling task has one 'text' column, the token column (got {task.text})")
    if not task.labels:
        raise ValueError("a sequence_labelling task needs 'labels', its BIO tag set (O, B-<type>, I-<type>, ...)")
    if len(set(task.labels)) != len(task.labels):
        raise ValueError(f"'labels' has duplicates: {task.labels}")
    check_tag_set(task.labels)
    _check_formats(task, "conll")


def check_span_extraction(task: TaskDef) -> None:
    """Every file split in the ``squad`` format, ``label: answers``, and windows that fit ``max_length``; raises
    ValueError."""
    if task.candidates is not None or task.labels is not None:
        raise ValueError("'candidates' and 'labels' are not fields of a span_extraction task")
    if task.text:
        raise ValueError("'text' is not a field of a span_extraction task: the question and the context are read "
                         "from its SQuAD file")
    _check_formats(task, "squad")
    if task.label != "answers":
        raise ValueError(f"a span_extraction task's 'label' is 'answers', the SQuAD field of the gold answers "
                         f"(got {task.label!r})")
    spec = task.qa_spec
    if not stride_fits(task.max_length, spec.doc_stride):
        raise ValueError(f"qa.doc_stride {spec.doc_stride} must be below max_length - 8 = {task.max_length - 8}")


def _check_formats(task: TaskDef, fmt: str) -> None:
    for name, spec in task.splits.items():
        if spec.path is not None and spec.format != fmt:
            raise ValueError(f"split '{name}': a {task.type} task reads files in the '{fmt}' format "
                             f"(format: {spec.format})")
        if spec.hub is not None:
            raise ValueError(f"split '{name}': hub splits are not supported for {task.type} tasks")
        if spec.carve is not None and spec.carve.by == "article" and fmt != "squad":
            raise ValueError(f"split '{name}': carve by article is for squad files only")


def tagging_width(task: TaskDef) -> int:
    """Outputs per piece, the width of per-piece soft targets: one logit per tag."""
    return len(task.labels or [])


def span_width(task: TaskDef) -> int:
    """Outputs per piece, the width of per-piece soft targets: 2, the start and end logits."""
    return 2


def first_piece_mask(split) -> list[list[int]]:
    """Per row of a tokenized sequence-labelling split, 1 on the first piece of each word (the pieces that carry
    a tag), from its ``word_ids`` (-1: special tokens)."""
    masks = []
    for word_ids in split.features["word_ids"]:
        masks.append([int(w >= 0 and (i == 0 or w != word_ids[i - 1])) for i, w in enumerate(word_ids)])
    return masks


def window_mask(split) -> list[list[int]]:
    """Per window of a tokenized span-extraction split, 1 on every piece: the start and end distributions range
    over the whole window (question and special pieces included, as the head's softmax does)."""
    return [[1] * n for n in split.lengths]


# ------------------------------------------------------------------------------------------------ reading


def file_only(task: TaskDef, row: dict[str, str], line: int) -> list:
    """Token-level files are read whole (:func:`read_file`), never row by row; raises ValueError."""
    raise ValueError(f"a {task.type} task reads its files whole (format conll or squad), not rows of a table")


def parse_answers(task: TaskDef, value: str):
    """SQuAD answers are read with their file (:func:`read_file`), never as a table field; raises ValueError."""
    raise ValueError("a span_extraction task reads its answers from its SQuAD file")


def parse_tag(task: TaskDef, value: str) -> int:
    """A tag of the task's tag set -> its id; raises ValueError naming the tag set."""
    if value.strip() not in (task.labels or []):
        raise ValueError(f"tag {quote_prefix(value)} is not in the task's tag set ({', '.join(task.labels or [])})")
    return list(task.labels).index(value.strip())


def read_file(task: TaskDef, split: str, path) -> list:
    """The examples of one file split: :class:`~mtdnn.tasks.conll.TaggedSentence` or
    :class:`~mtdnn.tasks.squad.QAExample` rows.

    Raises:
        DataError: see :func:`mtdnn.tasks.conll.read_conll` and :func:`mtdnn.tasks.squad.read_squad`; also a
            train or dev split without its gold: a CoNLL split whose ``columns`` lack the task's ``label``
            column, or a SQuAD question without answers (named by id).
    """
    spec = task.splits[split]
    needs_gold = split in LABELLED_SPLITS
    if spec.format == "squad":
        examples = read_squad(path, task.name, spec.encoding)
        unanswered = [ex.id for ex in examples if not ex.answers]
        if needs_gold and unanswered:
            raise DataError(f"{path}: task '{task.name}', split '{split}', question id "
                            f"{quote_prefix(unanswered[0])}: field "
                            f"'answers': no answer ({len(unanswered)} of {len(examples)} questions have none); "
                            f"every question of a {split} split needs at least one")
        return examples
    columns = list(spec.columns or [])
    if needs_gold and task.label not in columns:
        raise DataError(f"{path}: task '{task.name}', split '{split}', field 'label': column {task.label!r} is not "
                        f"in the split's columns ({', '.join(columns)})")
    return read_conll(path, columns, task.text[0], task.label, list(task.labels or []), task.name, spec.encoding)


def article_lists(tasks: dict, data_dir) -> dict[str, dict[str, list[str]]]:
    """For every task with a split carved by article: ``{task: {split: [article titles]}}`` of its labelled
    splits (what a run writes to ``carves.json``); empty when no task carves by article."""
    from .data import load_split

    lists = {}
    for name, task in tasks.items():
        if any(spec.carve is not None and spec.carve.by == "article" for spec in task.splits.values()):
            lists[name] = {split: list(dict.fromkeys(ex.title for ex in load_split(task, split, data_dir).examples))
                           for split in ("train", "dev") if split in task.splits}
    return lists


# ------------------------------------------------------------------------------------------------ tokenization


def tokenize_tagging(examples: list, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """Word pieces with the tag on each word's first piece (:func:`~mtdnn.tasks.token_features.tokenize_sentences`)."""
    return tokenize_sentences(examples, tokenizer, max_length)


def tokenize_spans(examples: list, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """Question-context windows (:func:`~mtdnn.tasks.token_features.tokenize_qa`), with the task's ``doc_stride``."""
    check_window_settings(max_length, task.qa_spec.doc_stride, task.name)
    return tokenize_qa(examples, tokenizer, max_length, task.qa_spec.doc_stride, task.name)


def collate_tags(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                 tokenizer=None) -> dict:
    """A sequence-labelling batch; ``labels`` ``(n, seq_len)`` piece labels (-100 where ignored)."""
    return collate_tagging(features, task.name, pad_token_id, pad_to_multiple_of)


def collate_windows(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                    tokenizer=None) -> dict:
    """A span-extraction batch of windows; ``labels`` ``(n, 2)`` gold start and end pieces."""
    return collate_spans(features, task.name, pad_token_id, pad_to_multiple_of)


# ------------------------------------------------------------------------------------------------ outputs


def as_is(task: TaskDef, x: torch.Tensor) -> torch.Tensor:
    """Token heads give their outputs in their final shape (``(n, seq_len, tags)`` or ``(n, seq_len, 2)``)."""
    return x


def first_piece_tags(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[list, list]:
    """What entity metrics compare: per real sentence, the predicted and gold tag ids of its labelled pieces
    (each word's first piece), as Hugging Face ``run_ner`` scores them."""
    predicted, gold = [], []
    preds = outputs.argmax(-1).tolist()
    for row, (p, g) in enumerate(zip(preds, labels.tolist())):
        if weight[row] > 0:
            gold.append([t for t in g if t != IGNORE])
            predicted.append([t for t, label in zip(p, g) if label != IGNORE])
    return predicted, gold


def window_logits(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What span metrics keep: the windows' logits ``(n, seq_len, 2)``, labels ``(n, 3)`` (whose third column, the
    window's row, identifies it) and weights (see :class:`mtdnn.modeling.token_metrics.SpanScores`)."""
    return outputs, labels, weight


def decode_tags(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """Per row, the predicted tag of every piece (see :mod:`mtdnn.evaluation.predict` for words and entities)."""
    names = task.labels or []
    return [{"prediction": [names[i] for i in row]} for row in outputs.argmax(-1).tolist()]


def decode_windows(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """Per window, the best start and end piece (answers over all windows: ``mtdnn.evaluation.predict``)."""
    return [{"prediction": [int(s), int(e)]} for s, e in zip(outputs[..., 0].argmax(-1), outputs[..., 1].argmax(-1))]
