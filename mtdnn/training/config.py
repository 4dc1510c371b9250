"""``TrainConfig``: every setting of a training run, one validated object.

The command line builds it from flags (:mod:`mtdnn.cli.train`), the Python API takes it
(:func:`mtdnn.fit`), teachers, the student and transfer build it in code. A run directory's ``config.yaml`` is this
object written whole, resolved (the tasks trained, the data root and the run directory filled in), followed by a
``resolved`` section the toolkit's readers use (the encoder actually loaded, the task definitions)::

    task_defs: task_defs/glue.yaml
    tasks: [rte, stsb]
    ...
    resolved: {command: train, encoder: ..., source_encoder: ..., tasks: {rte: {...}, stsb: {...}}}

``python -m mtdnn.train --config runs/<run>/config.yaml`` reads it back (the ``resolved`` section is ignored) and
reruns the same run. Unknown keys, wrong types and out-of-range values are errors naming the file, the field and
the value (:class:`mtdnn.errors.ConfigError`).
"""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError, format_validation_error, validate
from ..fileio import read_yaml, yaml_float
from ..tasks.taskdef import MAX_LENGTH_RANGE

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
RESOLVED_KEY = "resolved"
_RAW_ERRORS = contextvars.ContextVar("raw_errors", default=False)  # see TrainConfig.__init__
SEED_MAX = 2**32 - 1  # numpy's seed range, which Lightning's seed_everything uses


class TrainConfig(BaseModel):
    """The settings of one training run (``python -m mtdnn.train``'s flags, by the same names).

    Frozen: change one with ``config.model_copy(update={...})`` (validated again by :meth:`updated`).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def __init__(self, **fields: Any) -> None:
        """``TrainConfig(field=value, ...)``.

        Raises:
            ConfigError: one line per bad field, as the command line reports it (not pydantic's ValidationError).
        """
        if _RAW_ERRORS.get():  # validate_config formats the errors itself, naming its source and flags
            super().__init__(**fields)
            return
        try:
            super().__init__(**fields)
        except ValidationError as err:
            raise ConfigError(format_validation_error("TrainConfig", err)) from None

    # what to train
    task_defs: str
    tasks: list[str] | None = Field(default=None, min_length=1)
    data_dir: str | None = None
    encoder: str = "packaged-minilm"
    init_from: str | None = None
    trust_remote_code: bool = False
    # the run directory
    output_dir: str | None = None
    checkpoint_every_n_steps: int | None = Field(default=None, gt=0)
    loggers: list[Literal["csv", "tensorboard", "wandb", "mlflow"]] | None = None
    # optimisation
    max_epochs: int = Field(default=3, gt=0)
    max_steps: int | None = Field(default=None, gt=0)
    batch_size: int = Field(default=32, gt=0)
    accumulate_grad_batches: int = Field(default=1, gt=0)
    eval_batch_size: int = Field(default=64, gt=0)
    lr: float = Field(default=5e-5, gt=0, le=1, allow_inf_nan=False)
    weight_decay: float = Field(default=0.01, ge=0, allow_inf_nan=False)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1, allow_inf_nan=False)
    gradient_clip: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    max_length: int | None = Field(default=None, ge=MAX_LENGTH_RANGE[0], le=MAX_LENGTH_RANGE[1])
    dropout: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    # task schedule and data
    schedule: Literal["proportional", "temperature", "uniform"] = "proportional"
    temperature: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    seed: int = Field(default=42, ge=0, le=SEED_MAX)
    data_seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    limit_train_examples: int | None = Field(default=None, gt=0)
    limit_eval_examples: int | None = Field(default=None, gt=0)
    pad_to_multiple_of: int = Field(default=1, gt=0)
    group_by_length: bool = True
    # dev evaluation and model selection
    eval_every_n_steps: int | None = Field(default=None, gt=0)
    early_stopping_patience: int | None = Field(default=None, gt=0)
    # Lightning Trainer (engineering)
    accelerator: str = "auto"
    devices: int | str = "auto"
    strategy: str = "auto"
    num_nodes: int = Field(default=1, gt=0)
    precision: str = "32-true"
    num_workers: int = Field(default=0, ge=0)
    keep_last_checkpoint: bool = False
    compile: str | None = None
    deterministic: bool = False
    # speed (see mtdnn.training.speed)
    length_buckets: list[int] | None = Field(default=None, min_length=1)
    cuda_graphs: bool = False
    sdpa_backend: Literal["auto", "efficient", "math"] = "auto"

    @field_validator("lr", "weight_decay", "warmup_ratio", "gradient_clip", "dropout", "temperature", mode="before")
    @classmethod
    def _floats(cls, value):
        return yaml_float(value)

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if self.tasks is not None and len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"field 'tasks': lists a task twice ({self.tasks})")
        if self.loggers is not None and len(set(self.loggers)) != len(self.loggers):
            raise ValueError(f"field 'loggers': lists a logger twice ({self.loggers})")
        buckets = self.length_buckets
        if buckets is not None and (any(b <= 0 for b in buckets) or buckets != sorted(set(buckets))):
            raise ValueError(f"field 'length_buckets': give positive lengths in ascending order (got {buckets})")
        return self

    def updated(self, **changes: Any) -> "TrainConfig":
        """A validated copy with ``changes`` applied (``model_copy`` alone would skip validation)."""
        return TrainConfig.model_validate({**self.model_dump(), **changes})

    def to_yaml_dict(self) -> dict:
        """Plain values, in field order, for ``config.yaml``."""
        return self.model_dump(mode="json")


def validate_config(raw: dict, source: str, flags: bool = False) -> TrainConfig:
    """Validate a mapping of settings into a :class:`TrainConfig`.

    Args:
        source: names the origin in messages (a file, or ``command line``).
        flags: name fields as flags (``--warmup-ratio``) rather than YAML fields.

    Raises:
        ConfigError: one line per problem, naming the source, the field (or flag) and the value.
    """
    token = _RAW_ERRORS.set(True)
    try:
        return validate(TrainConfig, raw, source, flags)
    finally:
        _RAW_ERRORS.reset(token)


def read_config_file(path: str | Path) -> dict:
    """The settings of a config file (a run's ``config.yaml`` or one written by hand), ``resolved`` dropped.

    Raises:
        ConfigError: unreadable, not YAML, not a mapping, or the ``config.yaml`` of another command (a student).
    """
    path = Path(path)
    raw = read_yaml(path, ConfigError, "training config (--config)")
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path}: a training config is a mapping of fields (got {type(raw).__name__})")
    resolved = raw.pop(RESOLVED_KEY, None) or {}
    command = resolved.get("command", "train") if isinstance(resolved, dict) else "train"
    if command != "train" or "args" in raw:
        raise ConfigError(f"--config {path}: the configuration of a '{raw.get('command', command)}' run, not of "
                          "python -m mtdnn.train (a student reruns with python -m mtdnn.distill SPEC; a run "
                          "written before config.yaml held the TrainConfig cannot be read back)")
    return raw


def load_config(path: str | Path, overrides: dict | None = None) -> TrainConfig:
    """A :class:`TrainConfig` from a config file, with ``overrides`` (field: value) applied.

    Raises:
        ConfigError: see :func:`read_config_file` and :func:`validate_config`.
    """
    return validate_config({**read_config_file(path), **(overrides or {})}, str(path))
