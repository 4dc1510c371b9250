"""Task definitions: YAML files (``task_defs/*.yaml``) validated into typed :class:`TaskDef` objects.

A task definition file has one top-level key, ``tasks``, mapping task names to definitions::

    tasks:
      rte:
        type: classification            # a registered task type (mtdnn.tasks.types.TASK_TYPES): classification, ...
        splits:
          train: {path: glue/RTE/train.tsv}          # relative to the data root (--data-dir), inside it
          dev:   {path: glue/RTE/dev.tsv}
          test:  {path: glue/RTE/test.tsv, id: index}
        text: [sentence1, sentence2]    # one column (single sentence) or two (premise, hypothesis)
        label: label
        labels: [entailment, not_entailment]   # order = class id; integer labels map to this order
        metrics: [accuracy]             # the first metric is the one averaged for model selection

Loading uses :func:`mtdnn.fileio.read_yaml` (safe; a repeated key, an anchor or an alias is refused with its
line); unknown keys and wrong types are errors that quote the file, task, field and
offending value (:class:`mtdnn.errors.ConfigError`). Only the selected tasks' *files* are checked later, by
:mod:`mtdnn.tasks.data`; every task's *definition* is validated here.

A split's ``path`` is relative to the data root and stays inside it: an absolute path (``/proc/self/environ``,
``C:\\data``) or one that climbs out of the root with ``..`` (``../../etc/passwd``, ``a/../../b``) is refused, so
that the data root alone says which files a task definition can read (a symbolic link placed inside the root is
followed: putting it there is the user's choice). Messages quote file content by a bounded prefix
(:func:`mtdnn.fileio.quote_prefix`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..fileio import quote_prefix, read_yaml
from .splits import CarveSource, FoldSource, HubSource, SplitSpec, _Strict, task_splits_source  # noqa: F401
from .types import TASK_TYPES, TaskKind

MAX_LENGTH_RANGE = (8, 4096)
"""The valid range of a max sequence length, in a task definition, a spec and ``--max-length``: room for a pair's
special tokens and some of each text (a fast tokenizer returns a pair whole when it cannot truncate it)."""


class HeadSpec(_Strict):
    """Task head options: its type, dropout before the output layer and how the sequence is pooled.

    ``type``: one of the task type's heads (:data:`mtdnn.tasks.types.TASK_TYPES`; default: its first, ``linear``
    for the sentence-level types), ``san`` for the stochastic answer network of MT-DNN (classification of text
    pairs, :class:`mtdnn.modeling.san.SanHead`) with ``steps`` reasoning steps (default 5) and ``step_dropout``,
    the probability of dropping a whole step's prediction in training (default 0.1).
    ``pooling``: ``cls`` (hidden state of the first real token: [CLS] or <s>), ``last`` (of the last real token:
    XLNet's <cls>), ``mean`` (mask-aware mean over tokens) or ``pooler`` (the encoder's pooled [CLS], dense +
    tanh, as BERT and MT-DNN use). None (not set): chosen for the encoder when the model is built
    (:func:`mtdnn.modeling.heads.default_pooling`), and recorded in the run's ``config.yaml`` and export.
    """

    type: str | None = None
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    pooling: Literal["cls", "last", "mean", "pooler"] | None = None
    steps: int | None = Field(default=None, ge=1, le=20)
    step_dropout: float | None = Field(default=None, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _san_options(self) -> "HeadSpec":
        given = [k for k in ("steps", "step_dropout") if getattr(self, k) is not None]
        if given and self.type != "san":
            raise ValueError(f"{', '.join(given)}: only for head type 'san' (head type: {self.type or 'default'})")
        return self


class MaskingSpec(_Strict):
    """How an ``mlm`` task masks its sequences (:mod:`mtdnn.tasktypes.mlm.masking`).

    ``strategy``: ``static`` (BERT), ``dynamic`` (RoBERTa), ``whole_word``, ``span`` (SpanBERT); ``rate``: the
    fraction of tokens predicted, in (0, 1) (0.15 in all three papers); ``seed``: fixes static and dev masks (and
    seeds the dynamic ones); ``sbo``: SpanBERT's span boundary objective as well (``span`` only).
    """

    strategy: Literal["static", "dynamic", "whole_word", "span"] = "dynamic"
    rate: float = Field(default=0.15, gt=0.0, lt=1.0)
    seed: int = 0
    sbo: bool = False

    @field_validator("rate", mode="before")
    @classmethod
    def _rate_as_float(cls, value):
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class QASpec(_Strict):
    """Windows and answer decoding of a ``span_extraction`` task (:mod:`mtdnn.tasktypes.spans.features`,
    :mod:`mtdnn.modeling.span_decoding`).

    ``doc_stride``: context pieces shared by consecutive windows (the fast tokenizer's ``stride``, as Hugging Face
    ``run_qa``'s ``doc_stride``); ``max_answer_length``: the longest answer in pieces; ``n_best``: spans kept per
    question.
    """

    doc_stride: int = Field(default=128, ge=0)
    max_answer_length: int = Field(default=30, ge=1)
    n_best: int = Field(default=20, ge=1)


class TaskDef(_Strict):
    """One task: its data, its type, loss, metrics and head. See the module docstring for the YAML form.

    Ranking tasks (MT-DNN's pairwise ranking formulation, arXiv 1901.11504 section 3) score each of the
    ``candidates`` columns against the ``text`` columns (joined with a space) and take a softmax over the
    group; the ``label`` column holds the 0-based index of the correct candidate. A ranking task may have no
    ``text`` columns (``text: []``): each candidate is then scored alone (a candidates-only baseline, such as
    Niven and Kao's warrants-only ARCT).

    ``drop_labels`` lists label values that mark a row as having no gold label, such as SNLI's ``-`` (no
    annotator majority; ``-1`` in the Hugging Face copy). Such rows are removed when the file is read, and
    counted (:attr:`mtdnn.tasks.data.RawSplit.dropped`), instead of being errors.
    """

    name: str
    type: str
    splits: dict[str, SplitSpec]
    text: list[str] = []
    candidates: list[str] | None = None
    label: str | None = None
    labels: list[str] | None = None
    loss: str | None = None
    metrics: list[str] | None = None
    head: HeadSpec = HeadSpec()
    masking: MaskingSpec | None = None
    qa: QASpec | None = None
    max_length: int = Field(default=128, ge=MAX_LENGTH_RANGE[0], le=MAX_LENGTH_RANGE[1])
    sampling_weight: float = Field(default=1.0, gt=0.0)
    loss_weight: float = Field(default=1.0, ge=0.0)
    on_malformed: Literal["error", "skip"] = "error"
    drop_labels: list[str] | None = None
    glue_name: str | None = None
    description: str | None = None

    @field_validator("labels", "drop_labels", mode="before")
    @classmethod
    def _labels_as_strings(cls, value):
        # YAML reads `labels: [0, 1]` as integers; label names are strings.
        if isinstance(value, list):
            return [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
        return value

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in TASK_TYPES:
            raise ValueError(f"unknown task type (registered types: {', '.join(TASK_TYPES)})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "TaskDef":
        kind = self.kind
        kind.check(self)
        if kind.labelled and self.label is None:
            raise ValueError(f"field 'label': a {self.type} task needs 'label' (the label column)")
        if self.head.type is not None and self.head.type not in kind.heads:
            raise ValueError(f"field 'head.type': head type '{self.head.type}' does not fit a {self.type} task "
                             f"(allowed: {', '.join(kind.heads)})")
        if self.loss is not None and self.loss not in kind.losses:
            raise ValueError(f"field 'loss': loss '{self.loss}' does not fit a {self.type} task "
                             f"(use {', '.join(kind.losses)})")
        for metric in self.metrics or []:
            if metric not in kind.metrics:
                raise ValueError(f"field 'metrics': metric '{metric}' does not fit a {self.type} task "
                                 f"(allowed: {', '.join(sorted(kind.metrics))})")
        if self.drop_labels and set(self.drop_labels) & set(self.labels or []):
            raise ValueError(f"field 'drop_labels': {self.drop_labels} overlaps 'labels' {self.labels}: a value "
                             "cannot be both a class and a row to drop")
        if self.qa is not None and "qa" not in kind.own_fields:
            raise ValueError(f"field 'qa': only for span_extraction tasks, not {self.type}")
        if "f1" in (self.metrics or []) and len(self.labels or []) != 2:
            raise ValueError("field 'labels': metric 'f1' is the binary F1 of class 1 and needs exactly two labels "
                             f"(got {self.labels})")
        for split, spec in self.splits.items():
            where = f"field 'splits.{split}"
            if spec.carve is not None and spec.carve.from_split not in self.splits:
                raise ValueError(f"{where}.carve': split '{split}' carves from unknown split "
                                 f"'{spec.carve.from_split}'")
            if spec.folds is not None and spec.folds.from_split not in self.splits:
                raise ValueError(f"{where}.folds': split '{split}' takes folds of unknown split "
                                 f"'{spec.folds.from_split}'")
            if spec.folds is not None and task_splits_source(self.splits, spec.folds.from_split) == "folds":
                raise ValueError(f"{where}.folds': split '{split}' takes folds of split "
                                 f"'{spec.folds.from_split}', itself made of folds")
        return self

    @property
    def kind(self) -> TaskKind:
        """This task's type, the object that does everything type-specific (:data:`mtdnn.tasks.types.TASK_TYPES`,
        the classes of :mod:`mtdnn.tasktypes`)."""
        return TASK_TYPES[self.type]

    @property
    def qa_spec(self) -> QASpec:
        """``qa``, defaulting to a stride of 128 pieces, answers of at most 30 pieces and 20 best spans."""
        return self.qa or QASpec()

    @property
    def masking_spec(self) -> MaskingSpec:
        """``masking``, defaulting to dynamic masking of 15% of the tokens."""
        return self.masking or MaskingSpec()

    @property
    def head_type(self) -> str:
        """``head.type``, defaulting to the type's first head (``linear`` for sentence-level types)."""
        return self.head.type or self.kind.heads[0]

    @property
    def loss_name(self) -> str:
        """The loss, defaulting by task type (cross_entropy, mse, ranking_cross_entropy)."""
        return self.loss or self.kind.losses[0]

    @property
    def metric_names(self) -> list[str]:
        """The metrics, first one used for model selection; defaults by task type."""
        return list(self.metrics or self.kind.default_metrics)

    @property
    def num_outputs(self) -> int:
        """Output units of the head per encoded sequence: classes for classification, 1 for regression and ranking."""
        return self.kind.num_outputs(self)

    @property
    def output_width(self) -> int:
        """Outputs per example as metrics and soft targets see them: classes, candidates (ranking), 1 (regression)."""
        width = self.kind.output_width
        if width is None:
            raise ValueError(f"task '{self.name}' is an {self.type} task: its outputs have no per-example width")
        return width(self)

    @property
    def num_candidates(self) -> int:
        """Candidates per ranking group; 1 for other task types."""
        return len(self.candidates) if self.candidates else 1

    def to_plain(self) -> dict:
        """A dict of plain Python types (for hyper-parameters, exports and ``weights_only`` checkpoints)."""
        return self.model_dump(mode="json", exclude_none=True)


def _format_error(source: str, task: str | None, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        value = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        where = f"task '{task}': " if task else ""
        if not loc:  # a check across fields: its message names the fields and values itself
            lines.append(f"{source}: {where}{msg}")
            continue
        shown = quote_prefix(value, 200) if not isinstance(value, dict) else "{...}"
        lines.append(f"{source}: {where}field '{loc}': {msg} (value: {shown})")
    return "\n".join(lines)


TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""A task name: a letter, then up to 63 letters, digits, ``_`` or ``-``: it names heads (torch's ``ModuleDict``
refuses a ``.``), metrics, files and directories (``predict``'s outputs, teacher caches)."""


RESERVED_TASK_NAMES = frozenset({
    "T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children", "clear",
    "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward", "get_buffer",
    "get_extra_state", "get_parameter", "get_submodule", "half", "ipu", "items", "keys", "load_state_dict",
    "modules", "mtia", "named_buffers", "named_children", "named_modules", "named_parameters", "parameters", "pop",
    "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule", "share_memory",
    "smart_apply", "state_dict", "to", "to_empty", "train", "training", "type", "update", "values", "xpu", "zero_grad"
})
"""Attributes of torch's ``nn.ModuleDict`` (2.13; ``smart_apply`` is set on ``nn.Module`` by transformers once a
model initialises its weights) that a task name could spell: such a name cannot key a head.
Listed here so that checking a task definition imports no torch; ``tests/test_taskdef.py`` checks the list
against the installed torch."""


def check_task_name(name: object, source: str) -> str:
    """``name`` if it is a valid task name (:data:`TASK_NAME`, and not an attribute of torch's ``ModuleDict``
    such as ``keys`` or ``training``, which cannot key a head).

    Raises:
        ConfigError: naming the file, the task and the rule.
    """
    text = str(name)
    if not TASK_NAME.fullmatch(text):
        hint = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")
        hint = (hint if hint[:1].isalpha() and hint.isascii() else f"task_{hint}".rstrip("_"))[:64]
        raise ConfigError(f"{source}: task {quote_prefix(text, 80)}: a task name is a letter followed by up to 63 "
                          f"letters, digits, '_' or '-' (no '.', '/' or spaces): rename it, e.g. {hint!r}")
    if text in RESERVED_TASK_NAMES:
        raise ConfigError(f"{source}: task '{text}': the name is reserved (an attribute of the model's head "
                          "container); rename the task")
    return text


def parse_tasks(raw: object, source: str) -> dict[str, TaskDef]:
    """Validate a parsed task-definition document into ``{name: TaskDef}``.

    Args:
        raw: the result of :func:`mtdnn.fileio.read_yaml` (or an equivalent dict) with a ``tasks`` mapping.
        source: the file name used in error messages.

    Raises:
        ConfigError: naming the file, task, field and offending value.
    """
    if not isinstance(raw, dict) or set(raw) != {"tasks"} or not isinstance(raw["tasks"], dict):
        keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise ConfigError(f"{source}: expected one top-level key 'tasks' mapping names to definitions (got {keys})")
    tasks: dict[str, TaskDef] = {}
    for name, body in raw["tasks"].items():
        check_task_name(name, source)
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: task '{name}': expected a mapping of fields (got {quote_prefix(body)})")
        try:
            tasks[str(name)] = TaskDef(name=str(name), **body)
        except ValidationError as err:
            raise ConfigError(_format_error(source, str(name), err)) from None
        except TypeError as err:  # e.g. a key named 'name' given twice
            raise ConfigError(f"{source}: task '{name}': {err}") from None
    if not tasks:
        raise ConfigError(f"{source}: 'tasks' is empty")
    return tasks


SHIPPED_TASK_DEFS = Path(__file__).resolve().parents[2] / "task_defs"  # the repository's task_defs/


def shipped_task_defs(path: str | Path) -> Path:
    """``path``, or, when it is a default such as ``task_defs/glue.yaml`` that does not exist relative to the
    current directory, the repository's own file of that name (so a default works from any directory)."""
    path = Path(path)
    if not path.is_absolute() and not path.exists() and path.parent == Path("task_defs"):
        shipped = SHIPPED_TASK_DEFS / path.name
        if shipped.is_file():
            return shipped
    return path


def load_task_defs(path: str | Path) -> dict[str, TaskDef]:
    """Read and validate a task-definition YAML file (the toolkit's loader, :func:`mtdnn.fileio.read_yaml`).

    Raises:
        ConfigError: the file is missing, is not valid YAML (a repeated key, an anchor or alias), or a task is
            invalid.
    """
    path = Path(path)
    return parse_tasks(read_yaml(path, ConfigError, "task definitions"), str(path))


def select_tasks(tasks: dict[str, TaskDef], names: list[str] | None, source: str) -> dict[str, TaskDef]:
    """The tasks named in ``names`` (all when None), in the given order.

    Raises:
        ConfigError: a name is not defined in ``source``.
    """
    if not names:
        return dict(tasks)
    unknown = [n for n in names if n not in tasks]
    if unknown:
        raise ConfigError(f"{source}: no task named {', '.join(unknown)} (defined: {', '.join(tasks)})")
    return {n: tasks[n] for n in names}
