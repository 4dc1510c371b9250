"""Teacher specs (``teachers/*.yaml``) and the spec-file plumbing shared with the student spec (:mod:`mtdnn.distill`).

Specs are pydantic models with strict types and unknown keys forbidden; :func:`load_spec` reads one with
the toolkit's YAML loader (:func:`mtdnn.fileio.read_yaml`) and turns every validation problem into one line naming
the file, the field and the value.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError, format_validation_error
from ..fileio import read_yaml, yaml_float
from ..training.config import LIGHTNING_FIELDS, RUN_FIELDS, overrides_model


class Spec(BaseModel):
    """Base of the teacher and student specs: strict types, unknown keys are errors, every float is finite."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


FinetuneSpec = overrides_model(
    "FinetuneSpec", RUN_FIELDS + LIGHTNING_FIELDS + ("trust_remote_code", "seed", "data_seed", "dropout"),
    """A teacher spec's ``finetune:``: overrides of the :class:`~mtdnn.training.config.TrainConfig` fields of the
    same names (validated by it) for every member; what members vary (``seed``, ``data_seed``, ``dropout``, and
    per member ``lr``, ``max_epochs``) is under ``vary``, the Lightning settings come from the command line.""")

LEGACY_FINETUNE_FIELDS = ("max_epochs", "lr", "batch_size", "eval_batch_size", "weight_decay", "warmup_ratio",
                          "gradient_clip", "max_length", "limit_train_examples", "limit_eval_examples",
                          "pad_to_multiple_of")
"""The fields a teacher member's record (``member-k.json``) and the manifest hold whether set or not: the fields
``finetune:`` had before it took every :class:`~mtdnn.training.config.TrainConfig` field."""


def finetune_record(finetune) -> dict:
    """``finetune:`` as member records and the manifest hold it: :data:`LEGACY_FINETUNE_FIELDS` always, any other
    field when the spec sets it. Records written before ``finetune:`` took every field compare equal for the same
    settings, so no finished member is reported built differently because the schema grew."""
    values = finetune.model_dump(mode="json")
    record = {k: values[k] for k in LEGACY_FINETUNE_FIELDS}
    record.update({k: values[k] for k in finetune.model_fields_set if k not in record})
    return record


class VarySpec(Spec):
    """What differs between the members of an ensemble, one value per member.

    ``seed``: the initialisation seed (head weights, dropout masks; default 1..members); ``data_seed``: the seed of
    the member's data order and task schedule (``TrainConfig.data_seed``; default: its ``seed``), so that members
    can differ in data order with the same initialisation or the reverse; ``dropout``: the member's
    ``TrainConfig.dropout`` (every dropout probability of encoder and head; default: the encoder's and task
    definition's); ``lr`` and ``max_epochs``: per-member overrides of ``finetune``.
    """

    seed: list[int] | None = None
    data_seed: list[int] | None = None
    dropout: list[float] | None = None
    lr: list[float] | None = None
    max_epochs: list[int] | None = None

    @field_validator("dropout", "lr", mode="before")
    @classmethod
    def _floats(cls, value):
        return [yaml_float(v) for v in value] if isinstance(value, list) else value

    @field_validator("dropout")
    @classmethod
    def _dropout_range(cls, value):
        for v in value or []:
            if not 0.0 <= v < 1.0:
                raise ValueError(f"a dropout must be in [0, 1) (got {v})")
        return value

    @field_validator("lr")
    @classmethod
    def _lr_range(cls, value):
        for v in value or []:
            if not (v > 0 and v < float("inf")):
                raise ValueError(f"a learning rate must be a finite number > 0 (got {v})")
        return value

    @field_validator("max_epochs")
    @classmethod
    def _epochs_range(cls, value):
        for v in value or []:
            if v < 1:
                raise ValueError(f"max_epochs must be >= 1 (got {v})")
        return value


VARIED = ("seed", "data_seed", "dropout", "lr", "max_epochs")


class TeacherSpec(Spec):
    """A teacher spec (``teachers/*.yaml``); relative paths are relative to the working directory.

    ``task_defs``: the task-definition file; ``from_run``: the multi-task run the members start from
    (``--from-run`` overrides it); ``output_dir``: the teacher directory; ``tasks``: one ensemble each;
    ``members``: ensemble size (per fold with ``cross_fit``); ``vary``: what differs between members (see
    :class:`VarySpec`); ``finetune``: the members' training settings; ``cross_fit``: K >= 2 for out-of-fold soft
    targets (the training set split into K label-stratified folds seeded by ``fold_seed``; the ``members`` of
    fold k train without fold k and give the soft targets of fold k; see :mod:`mtdnn.distillation.teachers`).
    """

    task_defs: str
    from_run: str | None = None
    output_dir: str
    tasks: list[str] = Field(min_length=1)
    members: int = Field(default=3, ge=1)
    vary: VarySpec = VarySpec()
    finetune: FinetuneSpec = FinetuneSpec()
    cross_fit: int | None = Field(default=None, ge=2)
    fold_seed: int = 0

    @model_validator(mode="after")
    def _members_differ(self) -> "TeacherSpec":
        for name in VARIED:
            values = getattr(self.vary, name)
            if values is not None and len(values) != self.members:
                raise ValueError(f"field 'vary.{name}': lists {len(values)} values for {self.members} members "
                                 "(field 'members'); give one per member")
        settings = [tuple(m[n] for n in VARIED) for m in self.member_settings]
        for i, a in enumerate(settings):
            if a in settings[:i]:
                raise ValueError(f"field 'vary': members {settings.index(a) + 1} and {i + 1} have the same settings "
                                 f"({dict(zip(VARIED, a))}); members of an ensemble must differ")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"field 'tasks': lists a task twice ({self.tasks})")
        return self

    @property
    def seeds(self) -> list[int]:
        return list(self.vary.seed or range(1, self.members + 1))

    @property
    def dropouts(self) -> list[float | None]:
        return list(self.vary.dropout or [None] * self.members)

    @property
    def member_settings(self) -> list[dict]:
        """Per member (1..members), what it varies: ``seed``, ``data_seed``, ``dropout``, ``lr``, ``max_epochs``
        (None: the default of ``finetune``, or the seed for ``data_seed``)."""
        out = []
        for i, seed in enumerate(self.seeds):
            out.append({"seed": seed, **{n: (getattr(self.vary, n) or [None] * self.members)[i]
                                         for n in VARIED if n != "seed"}})
        return out

    @property
    def folds(self) -> list[int | None]:
        """The folds 1..K with ``cross_fit``, else ``[None]`` (members see the whole training set)."""
        return list(range(1, self.cross_fit + 1)) if self.cross_fit else [None]


def load_spec(path: str | Path, model: type[Spec], kind: str) -> Spec:
    """Read a YAML spec file and validate it into ``model``.

    Raises:
        ConfigError: unreadable file, invalid YAML, or an invalid field (naming the file, field and value).
    """
    path = Path(path)
    raw = read_yaml(path, ConfigError, f"{kind} spec")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a {kind} spec is a mapping of fields (got {type(raw).__name__})")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(str(path), err)) from None
