"""What a task type is, and the registry of them by name: the ``type:`` of a task definition.

A task type is one class, a subclass of :class:`TaskKind`, written in its own package of :mod:`mtdnn.tasktypes`
(one package per family: ``sentence`` for classification, regression and ranking, ``tagging`` for sequence
labelling, ``spans`` for extractive QA, ``mlm``), and registered here under its name by
:mod:`mtdnn.tasktypes` (one line per type). This module is the generic side: the interface every type
implements and the registry :data:`TASK_TYPES`, so that the type-agnostic layer (:mod:`mtdnn.tasks.taskdef`,
:mod:`mtdnn.tasks.data`) calls a type through ``task.kind`` without importing the type packages, which sit
above ``modeling`` (their heads and losses are modeling code). The registry is filled when :mod:`mtdnn` is
imported (its ``__init__`` imports :mod:`mtdnn.tasktypes`), that is before any module of the package runs.

The pipeline asks a task's type at each stage:

    definition rules and defaults (:meth:`TaskKind.check`, ``heads``, ``losses``, ``metrics``) -> reading
    (``read_file``, or ``make_examples`` and ``parse_label`` per row of a table) -> tokenization
    (:meth:`TaskKind.tokenize`, cached) -> collation into the type's batch (:meth:`TaskKind.collate`) -> head
    and loss, built by the type (:meth:`TaskKind.build_head`, :meth:`TaskKind.loss`, ``distillation_loss``;
    ``head_outputs`` shapes the linear head's output), metrics (named in :data:`mtdnn.modeling.metrics.METRICS`)
    -> what the
    metrics compare (:meth:`TaskKind.metric_inputs`), the predictions of ``mtdnn.predict`` (``decode``) -> the
    soft targets of distillation (``soft_targets``, ``output_width``, ``soft_target_pieces``).

An operation a type does not have is absent: the attribute is None on the type, and the caller asks
(``if task.kind.decode is None: ...``) rather than calling a method that raises. Nothing here imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

if TYPE_CHECKING:
    from .rows import Example
    from .taskdef import TaskDef


@dataclass(frozen=True)
class HfModel:
    """How a type's head maps onto a Hugging Face task model, which ``transformers.pipeline`` serves as is.

    Attributes:
        auto_class: the ``transformers`` class that builds the family's model: ``AutoModelForSequenceClassification``
            (one sequence or pair in, fixed outputs), ``AutoModelForTokenClassification`` (a logit per tag on every
            piece) or ``AutoModelForQuestionAnswering`` (start and end logits on every piece).
        head: the toolkit head type that can equal the family's head (``linear``, ``token``, ``span``); another head
            type of the task type (SAN) has no such form.
        outputs: what the model's outputs are: ``labels``, one logit per ``labels`` entry (``id2label``);
            ``score``, one output labelled ``score`` (the HF logits ``(n, 1)`` squeezed to the head's ``(n,)``);
            ``span``, ``start_logits`` and ``end_logits`` ``(n, seq_len)``, stacked to the head's
            ``(n, seq_len, 2)`` and compared on real pieces only (the toolkit's head masks padding).
        pipeline: the ``transformers.pipeline`` task that serves the folder.
        problem_type: the config's ``problem_type`` (sequence classification: ``single_label_classification`` or
            ``regression``; None: the family's default).
    """

    auto_class: Literal["AutoModelForSequenceClassification", "AutoModelForTokenClassification",
                        "AutoModelForQuestionAnswering"]
    head: str
    outputs: Literal["labels", "score", "span"]
    pipeline: Literal["text-classification", "token-classification", "question-answering"]
    problem_type: Literal["single_label_classification", "regression"] | None = None


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


class TaskKind(ABC):
    """What one task type does at each stage of the pipeline. Subclasses set the class attributes and implement
    the abstract methods; the optional operations are None here and methods where a type has them.

    Attributes:
        name: the ``type`` of the task definition.
        heads: allowed ``head.type`` values, the first is the default (each built by :meth:`build_head`).
        losses: allowed ``loss`` values, the first is the default (each returned by :meth:`loss`).
        metrics: allowed ``metrics`` (:data:`mtdnn.modeling.metrics.METRICS`); ``default_metrics`` when none are
            given (the first one selects the best epoch).
        labelled: whether the type's examples carry gold labels (then a definition needs ``label``, and train and
            dev splits need their gold); mlm tasks have none (their targets are the masked tokens).
        soft_targets: how teacher members' outputs are combined (``probabilities``: mean of softmax, ``mean``:
            mean prediction), or None when the type cannot be distilled.
        soft_target_pieces: None when a soft target is one row of ``output_width`` values per example (the
            sentence-level types); else the soft targets are per word piece, ``(pieces, output_width)`` per row of
            the tokenized split, and :class:`SoftTargetPieces` says which pieces and along which axis.
        selected: whether the task's first dev metric counts in the dev average that selects the best epoch.
        no_predictions: why the type has no ``decode`` (said to a user who asks for predictions).
        own_fields: the definition's optional sections only this type accepts (span extraction: ``qa``); a
            definition of another type that sets one is refused.
        classifies: one class of ``labels`` per example (classification; not the per-piece tags of sequence
            labelling).
        ranks_candidates: one of the ``candidates`` columns per example (ranking).
        predicts_scores: one real-valued score per example (regression).
        hf_model: how the head exports as a Hugging Face task model (:class:`HfModel`); None: it cannot, and
            ``no_hf_model`` says why (in the export's ``toolkit_only``).
        pools: whether the head reads a pooled sequence vector (``head.pooling``); token-level and MLM heads read
            every piece, so their tasks get no pooling, none is logged or recorded.
        raw_fields: for the types that read whole files, the fields of one raw example given to ``mtdnn.predict``
            (the other types' are their ``text`` and ``candidates`` columns); ``prediction_unit``: what their
            predictions are made of (``entities`` of words, ``answers`` over windows).

    Optional operations (None: the type has none):
        read_file: ``(task, split, path)`` -> the examples of the whole file (``conll``, ``squad``); a type without
            it reads rows of a tsv/csv/jsonl table, each by ``make_examples``.
        make_examples: ``(task, row, line)`` -> the examples a parsed table row ``{column: text}`` holds (ids and
            labels are set by the caller).
        parse_label: ``(task, value)`` -> the label of a table's label field (class id, score, index); raises
            ValueError.
        output_width: ``(task)`` -> outputs per example as the metrics and soft targets see them (classes,
            candidates, 1); per piece for types with ``soft_target_pieces`` (tags; 2, start and end).
        head_outputs: ``(task, x)``: the linear head's ``(sequences, num_outputs)`` -> the task's outputs.
        decode: ``(task, outputs)`` -> one prediction dict per example (``mtdnn.predict``).
        distillation_loss: ``(task)`` -> the soft-target loss of a student's task of this type, ``(outputs,
            teacher_logits, labels, weight, normalizer, temperature, alpha, student_tempered=None)`` -> a scalar
            (:mod:`mtdnn.modeling.losses`); the types with ``soft_targets`` have it.
    """

    name: ClassVar[str]
    heads: ClassVar[tuple[str, ...]]
    losses: ClassVar[tuple[str, ...]]
    metrics: ClassVar[tuple[str, ...]]
    default_metrics: ClassVar[tuple[str, ...]]
    labelled: ClassVar[bool] = True
    soft_targets: ClassVar[Literal["probabilities", "mean"] | None] = None
    soft_target_pieces: ClassVar[SoftTargetPieces | None] = None
    selected: ClassVar[bool] = True
    no_predictions: ClassVar[str] = "its type writes none"
    own_fields: ClassVar[tuple[str, ...]] = ()
    classifies: ClassVar[bool] = False
    ranks_candidates: ClassVar[bool] = False
    predicts_scores: ClassVar[bool] = False
    hf_model: ClassVar[HfModel | None] = None
    no_hf_model: ClassVar[str] = "its head has no Hugging Face task model form"
    pools: ClassVar[bool] = True
    raw_fields: ClassVar[tuple[str, ...] | None] = None
    prediction_unit: ClassVar[Literal["entities", "answers"] | None] = None

    read_file: ClassVar[Callable[..., list] | None] = None
    make_examples: ClassVar[Callable[..., list[Example]] | None] = None
    parse_label: ClassVar[Callable[..., Any] | None] = None
    output_width: ClassVar[Callable[..., int] | None] = None
    head_outputs: ClassVar[Callable[..., Any] | None] = None
    decode: ClassVar[Callable[..., list[dict]] | None] = None
    distillation_loss: ClassVar[Callable[..., Callable] | None] = None

    @abstractmethod
    def check(self, task: TaskDef) -> None:
        """The type's own rules of a definition; raises ValueError with the reason (the field and value)."""

    @abstractmethod
    def num_outputs(self, task: TaskDef) -> int:
        """Output units of the head per encoded sequence."""

    @abstractmethod
    def build_head(self, task: TaskDef, encoder):
        """The head of ``task`` (``task.head_type``, one of :attr:`heads`) on ``encoder``, a Hugging Face
        ``AutoModel``: an ``nn.Module`` called as ``head(hidden, attention_mask, pooled, temperature=None,
        **head_inputs)`` (:mod:`mtdnn.modeling.heads` gives the shapes). ``task.head.pooling`` is resolved."""

    @abstractmethod
    def loss(self, task: TaskDef) -> Callable:
        """The loss function of ``task.loss_name`` (one of :attr:`losses`): ``(outputs, labels, weight,
        normalizer) -> scalar``, ``sum_i w_i l_i / normalizer`` (:mod:`mtdnn.modeling.losses`)."""

    @abstractmethod
    def tokenize(self, examples: list, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
        """``examples`` -> columns ``input_ids``, ``length`` and any of ``token_type_ids`` and the type's own
        per-example features (stored in the tokenized cache)."""

    @abstractmethod
    def collate(self, features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
                tokenizer=None):
        """Items of a tokenized split -> the type's batch (see :func:`mtdnn.tasks.collate.collate`)."""

    @abstractmethod
    def metric_inputs(self, outputs, labels, weight) -> tuple:
        """``(outputs, labels, weight)`` of a batch -> what the metrics compare, ``(predictions, targets)`` (or the
        type's own tuple), of the weight > 0 examples."""

    def output_names(self, task: TaskDef) -> list[str] | None:
        """The names of the per-example outputs: ``labels`` (classification), ``candidates`` (ranking); None for
        types whose outputs are not a choice among named columns or classes."""
        return None

    def encodes_pairs(self, task: TaskDef) -> bool:
        """Whether the task's inputs are tokenized as pairs (room for a pair's special tokens is needed)."""
        return len(task.text) > 1

    def check_max_length(self, task: TaskDef, value: int, source: str) -> None:
        """The type's own limit on a max length (beyond room for the special tokens and one token of each text);
        raises :class:`mtdnn.errors.ConfigError` naming ``source``. None by default."""

    def cache_rules(self, task: TaskDef) -> dict:
        """Definition fields beyond the shared parsing rules that the type's tokenized rows depend on, added to the
        tokenized-split cache key (span extraction: the stride of its windows). Empty by default."""
        return {}


TASK_TYPES: dict[str, TaskKind] = {}
"""Task type name (a definition's ``type``) -> its type object, in registration order (the order error messages
list them in). Filled by :mod:`mtdnn.tasktypes`."""


def register(kind: TaskKind) -> TaskKind:
    """Add a type to :data:`TASK_TYPES` under its ``name``; raises ValueError when the name is taken."""
    if TASK_TYPES.get(kind.name, kind) is not kind:
        raise ValueError(f"task type '{kind.name}' is registered twice")
    TASK_TYPES[kind.name] = kind
    return kind


def task_type(task: TaskDef) -> TaskKind:
    """The registry entry of ``task.type`` (validated when the definition was parsed)."""
    return TASK_TYPES[task.type]
