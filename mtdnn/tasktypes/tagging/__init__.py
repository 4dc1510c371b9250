"""``type: sequence_labelling`` (class :class:`SequenceLabelling`): a BIO tag per word (NER), read from CoNLL files.

The rules of its definition, how a split's file is read (whole files, :mod:`.conll`), tokenization with the tag on
each word's first piece (:mod:`.features`), batches and what the entity metrics compare (:mod:`.batches`, imported
when first needed, which keeps torch out of import time), and predictions read back per piece.

Head outputs: ``(n, seq_len, tags)`` tag logits. Outputs gathered over a split
(``mtdnn.training.inference.predict_outputs``) are padded to the longest row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import DataError
from ...tasks.rows import LABELLED_SPLITS
from ...tasks.types import HfModel, SoftTargetPieces, TaskKind
from ..files import check_formats
from .conll import check_tag_set, read_conll
from .features import tokenize_sentences

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef

TAGGING_METRICS = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")


def first_piece_mask(split) -> list[list[int]]:
    """Per row of a tokenized sequence-labelling split, 1 on the first piece of each word (the pieces that carry
    a tag), from its ``word_ids`` (-1: special tokens)."""
    masks = []
    for word_ids in split.features["word_ids"]:
        masks.append([int(w >= 0 and (i == 0 or w != word_ids[i - 1])) for i, w in enumerate(word_ids)])
    return masks


class SequenceLabelling(TaskKind):
    """``type: sequence_labelling``: one ``text`` column (the token), a ``label`` column (the tag), ``labels`` a BIO
    tag set, every file split in the ``conll`` format; the token head; soft targets per first piece of a word."""

    name = "sequence_labelling"
    heads = ("token",)
    losses = ("token_cross_entropy", "token_cross_entropy_per_piece")
    pools = False
    hf_model = HfModel("AutoModelForTokenClassification", "token", "labels", "token-classification")
    metrics = TAGGING_METRICS
    default_metrics = TAGGING_METRICS
    soft_targets = "probabilities"
    soft_target_pieces = SoftTargetPieces(mask=first_piece_mask, over="classes")
    raw_fields = ("text",)
    prediction_unit = "entities"

    def check(self, task: TaskDef) -> None:
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
        check_formats(task, "conll")

    def read_file(self, task: TaskDef, split: str, path) -> list:
        """The :class:`~.conll.TaggedSentence` rows of one CoNLL file split.

        Raises:
            DataError: see :func:`.conll.read_conll`; also a train or dev split whose ``columns`` lack the task's
                ``label`` column.
        """

        spec = task.splits[split]
        columns = list(spec.columns or [])
        if split in LABELLED_SPLITS and task.label not in columns:
            raise DataError(f"{path}: task '{task.name}', split '{split}', field 'label': column {task.label!r} is "
                            f"not in the split's columns ({', '.join(columns)})")
        return read_conll(path, columns, task.text[0], task.label, list(task.labels or []), task.name, spec.encoding)

    def num_outputs(self, task: TaskDef) -> int:
        """One logit per tag."""
        return len(task.labels)

    def build_head(self, task: TaskDef, encoder):
        """A linear layer on every piece (:func:`mtdnn.modeling.token_heads.token_head`)."""
        from ...modeling.token_heads import token_head  # keeps torch out of import time

        return token_head(task, encoder)

    def loss(self, task: TaskDef):
        """``token_cross_entropy`` (mean per sentence) or ``token_cross_entropy_per_piece``
        (:mod:`mtdnn.modeling.token_heads`)."""
        from ...modeling import token_heads  # keeps torch out of import time

        return getattr(token_heads, task.loss_name)

    def distillation_loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.token_heads.token_distillation_loss`, per sentence whichever gold loss the task
        names."""
        from ...modeling.token_heads import token_distillation_loss  # keeps torch out of import time

        return token_distillation_loss

    def output_width(self, task: TaskDef) -> int:
        """Outputs per piece, the width of per-piece soft targets: one logit per tag."""
        return len(task.labels or [])

    def tokenize(self, examples: list, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """Word pieces with the tag on each word's first piece (:func:`.features.tokenize_sentences`)."""
        return tokenize_sentences(examples, tokenizer, max_length)

    def collate(self, features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None):
        """A sequence-labelling batch; ``labels`` ``(n, seq_len)`` piece labels (-100 where ignored)."""
        from .batches import collate_tagging  # keeps torch out of import time

        return collate_tagging(features, task.name, pad_token_id, pad_to_multiple_of)

    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """See :func:`.batches.first_piece_tags`."""
        from .batches import first_piece_tags  # keeps torch out of import time

        return first_piece_tags(outputs, labels, weight)

    def decode(self, task: TaskDef, outputs) -> list[dict]:
        """Per row, the predicted tag of every piece (see :mod:`mtdnn.evaluation.token_predict` for words and
        entities)."""
        names = task.labels or []
        return [{"prediction": [names[i] for i in row]} for row in outputs.argmax(-1).tolist()]
