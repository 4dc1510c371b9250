"""``type: span_extraction`` (class :class:`SpanExtraction`): extractive QA, an answer span of the context per
question, read from SQuAD v1.1 files.

The rules of its definition, how a split's file is read (whole files, :mod:`.squad`), tokenization into
question-context windows (:mod:`.features`), batches (:mod:`.batches`, imported when first needed, which keeps
torch out of import time), and what the span metrics keep.

Head outputs: ``(n, seq_len, 2)`` start and end logits of each window (padding positions hold a large negative
value). Outputs gathered over a split (``mtdnn.training.inference.predict_outputs``) are padded to the longest row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, DataError
from ...fileio import quote_prefix
from ...tasks.rows import LABELLED_SPLITS
from ...tasks.types import HfModel, SoftTargetPieces, TaskKind
from ..files import check_formats
from .features import check_window_settings, stride_fits, tokenize_qa
from .squad import read_squad

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef

SPAN_METRICS = ("squad_f1", "exact_match")


def window_mask(split) -> list[list[int]]:
    """Per window of a tokenized span-extraction split, 1 on every piece: the start and end distributions range
    over the whole window (question and special pieces included, as the head's softmax does)."""
    return [[1] * n for n in split.lengths]


class SpanExtraction(TaskKind):
    """``type: span_extraction``: every file split in the ``squad`` format, ``label: answers``, windows of
    ``max_length`` pieces sharing ``qa.doc_stride``; the span head; soft targets per piece of a window."""

    name = "span_extraction"
    heads = ("span",)
    losses = ("span_cross_entropy",)
    pools = False
    hf_model = HfModel("AutoModelForQuestionAnswering", "span", "span", "question-answering")
    metrics = SPAN_METRICS
    default_metrics = SPAN_METRICS
    soft_targets = "probabilities"
    soft_target_pieces = SoftTargetPieces(mask=window_mask, over="pieces")
    own_fields = ("qa",)
    raw_fields = ("question", "context")
    prediction_unit = "answers"

    def check(self, task: TaskDef) -> None:
        """Every file split in the ``squad`` format, ``label: answers``, and windows that fit ``max_length``;
        raises ValueError."""
        if task.candidates is not None or task.labels is not None:
            raise ValueError("'candidates' and 'labels' are not fields of a span_extraction task")
        if task.text:
            raise ValueError("'text' is not a field of a span_extraction task: the question and the context are "
                             "read from its SQuAD file")
        check_formats(task, "squad")
        if task.label != "answers":
            raise ValueError(f"a span_extraction task's 'label' is 'answers', the SQuAD field of the gold answers "
                             f"(got {task.label!r})")
        spec = task.qa_spec
        if not stride_fits(task.max_length, spec.doc_stride):
            raise ValueError(f"qa.doc_stride {spec.doc_stride} must be below max_length - 8 = {task.max_length - 8}")

    def check_max_length(self, task: TaskDef, value: int, source: str) -> None:
        """A window of ``value`` pieces must hold ``qa.doc_stride`` (:func:`.features.stride_fits`); raises
        ConfigError."""

        if not stride_fits(value, task.qa_spec.doc_stride):
            raise ConfigError(f"{source}: max length {value} is too short for task '{task.name}': its field "
                              f"'qa.doc_stride' {task.qa_spec.doc_stride} must be below max length - 8 = {value - 8}")

    def cache_rules(self, task: TaskDef) -> dict:
        """The windows depend on the stride."""
        return {"doc_stride": task.qa_spec.doc_stride}

    def read_file(self, task: TaskDef, split: str, path) -> list:
        """The :class:`~.squad.QAExample` questions of one SQuAD file split.

        Raises:
            DataError: see :func:`.squad.read_squad`; also a train or dev question without answers (named by id).
        """

        spec = task.splits[split]
        examples = read_squad(path, task.name, spec.encoding)
        unanswered = [ex.id for ex in examples if not ex.answers]
        if split in LABELLED_SPLITS and unanswered:
            raise DataError(f"{path}: task '{task.name}', split '{split}', question id "
                            f"{quote_prefix(unanswered[0])}: field "
                            f"'answers': no answer ({len(unanswered)} of {len(examples)} questions have none); "
                            f"every question of a {split} split needs at least one")
        return examples

    def num_outputs(self, task: TaskDef) -> int:
        """Start and end."""
        return 2

    def build_head(self, task: TaskDef, encoder):
        """Start and end logits on every piece (:func:`mtdnn.modeling.token_heads.span_head`)."""
        from ...modeling.token_heads import span_head  # keeps torch out of import time

        return span_head(task, encoder)

    def loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.token_heads.span_cross_entropy`."""
        from ...modeling.token_heads import span_cross_entropy  # keeps torch out of import time

        return span_cross_entropy

    def distillation_loss(self, task: TaskDef):
        """:func:`mtdnn.modeling.token_heads.span_distillation_loss`."""
        from ...modeling.token_heads import span_distillation_loss  # keeps torch out of import time

        return span_distillation_loss

    def output_width(self, task: TaskDef) -> int:
        """Outputs per piece, the width of per-piece soft targets: 2, the start and end logits."""
        return 2

    def tokenize(self, examples: list, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """Question-context windows (:func:`.features.tokenize_qa`), with the task's ``doc_stride``."""
        check_window_settings(max_length, task.qa_spec.doc_stride, task.name)
        return tokenize_qa(examples, tokenizer, max_length, task.qa_spec.doc_stride, task.name)

    def collate(self, features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None):
        """A span-extraction batch of windows; ``labels`` ``(n, 3)`` gold start and end pieces and the row."""
        from .batches import collate_spans  # keeps torch out of import time

        return collate_spans(features, task.name, pad_token_id, pad_to_multiple_of)

    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """What span metrics keep: the windows' logits ``(n, seq_len, 2)``, labels ``(n, 3)`` (whose third column,
        the window's row, identifies it) and weights (see :class:`mtdnn.modeling.token_metrics.SpanScores`)."""
        return outputs, labels, weight

    def decode(self, task: TaskDef, outputs) -> list[dict]:
        """Per window, the best start and end piece (answers over all windows: :mod:`mtdnn.evaluation.token_predict`)."""
        return [{"prediction": [int(s), int(e)]} for s, e in zip(outputs[..., 0].argmax(-1), outputs[..., 1].argmax(-1))]
