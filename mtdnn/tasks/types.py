"""The registry of task types: everything that differs between ``type: classification``, ``regression``, ...

Each entry of :data:`TASK_TYPES` is a :class:`TaskType`, the one place the pipeline looks a task's type up:

    definition rules and defaults (:mod:`mtdnn.tasks.taskdef`) -> row parsing and tokenization
    (:mod:`mtdnn.tasks.data`) -> collation into batches -> head, loss and metrics (looked up by the *names*
    given here in :data:`mtdnn.modeling.heads.HEADS`, :data:`mtdnn.modeling.losses.LOSSES` and
    :data:`mtdnn.modeling.metrics.METRICS`) -> what the metrics compare, the predictions written by
    ``mtdnn.predict`` -> the soft targets of distillation (shape and how members are combined).

Heads, losses and metrics are named rather than imported because they are modeling code, a stage above
this one. Adding a type is one new entry here (its data-side functions beside it, in a module of
:mod:`mtdnn.tasks`) and, where it needs a new head, loss or metric, one entry in the modeling registry
concerned. Nothing else in the package tests ``task.type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

import torch

from . import mlm, sentence, token
from .rows import Example

if TYPE_CHECKING:
    from .taskdef import TaskDef


@dataclass(frozen=True)
class SoftTargetPieces:
    """The shape of per-piece soft targets (token-level types), as the teacher build caches them and the student
    reads them: for each row of a tokenized split (a sentence, a QA window) the members' logits
    ``(pieces, output_width)`` over the row's real pieces, with a label mask.

    Attributes:
        mask: a tokenized split -> per row, 1 on each piece that carries a label (sequence labelling: the first
            piece of each word; span extraction: every piece of the window), 0 elsewhere.
        over: what one soft-target distribution ranges over: ``classes`` (at each piece, a distribution over the
            ``output_width`` classes: tags) or ``pieces`` (for each of the ``output_width`` columns, a distribution
            over the row's pieces: start and end).
    """

    mask: Callable[[Any], list[list[int]]]
    over: Literal["classes", "pieces"]


@dataclass(frozen=True)
class TaskType:
    """What one task type does at each stage of the pipeline.

    Attributes:
        name: the ``type`` of the task definition.
        heads: allowed ``head.type`` values, the first is the default (:data:`mtdnn.modeling.heads.HEADS`).
        losses: allowed ``loss`` values, the first is the default (:data:`mtdnn.modeling.losses.LOSSES`).
        metrics: allowed ``metrics`` (:data:`mtdnn.modeling.metrics.METRICS`); ``default_metrics`` when none are
            given (the first one selects the best epoch).
        check: the type's own rules of a definition; raises ValueError with the reason.
        num_outputs: output units of the head per encoded sequence.
        output_width: outputs per example as the metrics and soft targets see them (classes, candidates, 1); per
            piece for types with ``soft_target_pieces`` (tags; 2, start and end).
        make_examples: a parsed file row ``{column: text}`` and its line -> the examples it holds (ids and labels
            are set by the caller).
        parse_label: a label field -> the label (class id, score, index); raises ValueError. None: the type
            has no labels (its examples are never labelled).
        tokenize: ``(examples, task, tokenizer, max_length)`` -> columns ``input_ids``, ``length`` and any of
            ``token_type_ids`` and the type's own per-example features (stored in the tokenized cache).
        collate: ``(items, task, pad_token_id, pad_to_multiple_of, tokenizer)`` -> a batch (see
            :func:`mtdnn.tasks.data.collate`).
        head_outputs: the linear head's ``(sequences, num_outputs)`` -> the task's outputs.
        metric_inputs: ``(outputs, labels, weight)`` -> what the metrics compare, ``(predictions, targets)``, of
            the weight > 0 examples.
        decode: head outputs -> one prediction dict per example (``mtdnn.predict``).
        soft_targets: how teacher members' outputs are combined (``probabilities``: mean of softmax, ``mean``:
            mean prediction), or None when the type cannot be distilled.
        soft_target_pieces: None when a soft target is one row of ``output_width`` values per example (the
            sentence-level types); else the soft targets are per word piece, ``(pieces, output_width)`` per row of
            the tokenized split, and :class:`SoftTargetPieces` says which pieces and along which axis.
        selected: whether the task's first dev metric counts in the dev average that selects the best epoch.
        read_file: for types whose files are not tables of rows (``conll``, ``squad``): ``(task, split, path)``
            -> the examples of the whole file; None: rows of a tsv/csv/jsonl table, each by ``make_examples``.
    """

    name: str
    heads: tuple[str, ...]
    losses: tuple[str, ...]
    metrics: tuple[str, ...]
    default_metrics: tuple[str, ...]
    check: Callable[[TaskDef], None]
    num_outputs: Callable[[TaskDef], int]
    output_width: Callable[[TaskDef], int]
    make_examples: Callable[[TaskDef, dict[str, str], int], list[Example]]
    parse_label: Callable[[TaskDef, str], Any] | None
    tokenize: Callable[..., dict[str, list]]
    collate: Callable[..., dict]
    head_outputs: Callable[[TaskDef, torch.Tensor], torch.Tensor]
    metric_inputs: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    decode: Callable[[TaskDef, torch.Tensor], list[dict]]
    soft_targets: Literal["probabilities", "mean"] | None
    selected: bool = True
    read_file: Callable[[TaskDef, str, Any], list] | None = None
    soft_target_pieces: SoftTargetPieces | None = None


TASK_TYPES: dict[str, TaskType] = {
    "classification": TaskType(
        name="classification", heads=("linear", "san"), losses=("cross_entropy",),
        metrics=("accuracy", "f1", "mcc"), default_metrics=("accuracy",), check=sentence.check_classification,
        num_outputs=lambda task: len(task.labels), output_width=lambda task: len(task.labels),
        make_examples=sentence.pair_examples, parse_label=sentence.parse_class, tokenize=sentence.tokenize_pairs,
        collate=sentence.collate_classification, head_outputs=sentence.class_outputs, metric_inputs=sentence.argmax,
        decode=sentence.decode_classes, soft_targets="probabilities"),
    "regression": TaskType(
        name="regression", heads=("linear",), losses=("mse",), metrics=("pearson", "spearman"),
        default_metrics=("pearson", "spearman"), check=sentence.check_regression,
        num_outputs=lambda task: 1, output_width=lambda task: 1, make_examples=sentence.pair_examples,
        parse_label=sentence.parse_score, tokenize=sentence.tokenize_pairs, collate=sentence.collate_regression,
        head_outputs=sentence.score_outputs, metric_inputs=sentence.as_scores, decode=sentence.decode_scores,
        soft_targets="mean"),
    "ranking": TaskType(
        name="ranking", heads=("linear",), losses=("ranking_cross_entropy",), metrics=("accuracy",),
        default_metrics=("accuracy",), check=sentence.check_ranking,
        num_outputs=lambda task: 1, output_width=lambda task: task.num_candidates,
        make_examples=sentence.ranking_examples, parse_label=sentence.parse_candidate,
        tokenize=sentence.tokenize_ranking, collate=sentence.collate_ranking, head_outputs=sentence.group_outputs,
        metric_inputs=sentence.argmax, decode=sentence.decode_candidates, soft_targets="probabilities"),
    "mlm": TaskType(
        name="mlm", heads=("mlm",), losses=("mlm_cross_entropy",), metrics=("masked_accuracy", "masked_loss"),
        default_metrics=("masked_accuracy", "masked_loss"), check=mlm.check_mlm,
        num_outputs=lambda task: 0, output_width=mlm.no_width, make_examples=mlm.text_examples, parse_label=None,
        tokenize=mlm.tokenize_packed, collate=mlm.collate_mlm, head_outputs=mlm.no_head_outputs,
        metric_inputs=mlm.masked_targets, decode=mlm.no_decode, soft_targets=None, selected=False),
    "sequence_labelling": TaskType(
        name="sequence_labelling", heads=("token",), losses=("token_cross_entropy", "token_cross_entropy_per_piece"),
        metrics=token.TAGGING_METRICS, default_metrics=token.TAGGING_METRICS, check=token.check_sequence_labelling,
        num_outputs=lambda task: len(task.labels), output_width=token.tagging_width, make_examples=token.file_only,
        parse_label=token.parse_tag, tokenize=token.tokenize_tagging, collate=token.collate_tags,
        head_outputs=token.as_is, metric_inputs=token.first_piece_tags, decode=token.decode_tags,
        soft_targets="probabilities", read_file=token.read_file,
        soft_target_pieces=SoftTargetPieces(mask=token.first_piece_mask, over="classes")),
    "span_extraction": TaskType(
        name="span_extraction", heads=("span",), losses=("span_cross_entropy",), metrics=token.SPAN_METRICS,
        default_metrics=token.SPAN_METRICS, check=token.check_span_extraction, num_outputs=lambda task: 2,
        output_width=token.span_width, make_examples=token.file_only, parse_label=token.parse_answers,
        tokenize=token.tokenize_spans, collate=token.collate_windows, head_outputs=token.as_is,
        metric_inputs=token.window_logits, decode=token.decode_windows, soft_targets="probabilities",
        read_file=token.read_file, soft_target_pieces=SoftTargetPieces(mask=token.window_mask, over="pieces")),
}


def task_type(task: TaskDef) -> TaskType:
    """The registry entry of ``task.type`` (validated when the definition was parsed)."""
    return TASK_TYPES[task.type]
