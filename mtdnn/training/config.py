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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from ..errors import ConfigError, format_validation_error, validate
from ..fileio import read_yaml, yaml_float
from ..tasks.taskdef import MAX_LENGTH_RANGE

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
RESOLVED_KEY = "resolved"
_RAW_ERRORS = contextvars.ContextVar("raw_errors", default=False)  # see TrainConfig.__init__
SEED_MAX = 2**32 - 1  # numpy's seed range, which Lightning's seed_everything uses
OPTIMISATION, EVALUATION, LIGHTNING, SPEED = ("optimisation", "dev evaluation", "Lightning trainer",
                                              "speed (see the README's GPU section)")
"""The flag groups of ``--help`` (a field without a group is listed at the top; ``late``: after dev evaluation)."""


def setting(default: Any, description: str, *, group: str | None = None, metavar: str | None = None,
            cli_type: str | None = None, flag: bool = True, **constraints: Any):
    """A :class:`TrainConfig` field: its default, help text and range (pydantic ``Field`` constraints), and how its
    command-line flag is made (:mod:`mtdnn.cli.settings` generates every flag from these).

    Args:
        group: the ``--help`` group. metavar: the flag's placeholder.
        cli_type: a flag type other than the one its annotation and range give (``names``, ``loggers``,
            ``buckets``, ``devices``, ``max_length``, ``int``: a plain int left to this schema's range check,
            ``optional:<const>``: the value may be left out, meaning ``<const>``).
        flag: False for a field given otherwise (``task_defs``: the positional argument).
    """
    extra = {"cli": {"group": group, "metavar": metavar, "type": cli_type, "flag": flag}}
    return Field(default=default, description=description, json_schema_extra=extra, **constraints)


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
    task_defs: str = setting(..., "task-definition YAML (e.g. task_defs/glue.yaml)", flag=False)
    tasks: list[str] | None = setting(None, "comma-separated tasks to train (default: every task with a train split)",
                                      cli_type="names", min_length=1)
    data_dir: str | None = setting(None, "data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    encoder: str = setting("packaged-minilm", "Hugging Face encoder name or path; packaged-minilm is the embedded "
                                              "all-MiniLM-L6-v2")
    init_from: str | None = setting(None, "start from an earlier run's (or export's) encoder and the heads of matching "
                                          "tasks")
    trust_remote_code: bool = setting(False, "allow encoders with custom code from the hub (off by default)",
                                      group="late")
    # the run directory
    output_dir: str | None = setting(None, "run directory (default: runs/<task-defs>-<tasks>-seed<seed>)")
    checkpoint_every_n_steps: int | None = setting(
        None, "also save checkpoints/last.ckpt every N optimizer steps (always at epoch ends and on SIGTERM)",
        metavar="N", gt=0)
    loggers: list[Literal["csv", "tensorboard", "wandb", "mlflow"]] | None = setting(
        None, "comma-separated loggers, from csv, tensorboard, wandb, mlflow; W&B runs offline and MLflow writes local "
              "files under the run's logs/ unless $WANDB_MODE / $MLFLOW_TRACKING_URI say otherwise (default: csv)",
        cli_type="loggers")
    progress_every_n_steps: int = setting(
        50, "when standard error is not a terminal (a log file), print a progress line every N optimizer steps (step, "
            "per-task training loss, learning rate, examples/s, time left) and a line per dev evaluation; 0: none",
        metavar="N", ge=0)
    # optimisation
    max_epochs: int = setting(3, "training epochs", group=OPTIMISATION, gt=0)
    max_steps: int | None = setting(None, "stop after N optimizer steps (default: none)", group=OPTIMISATION,
                                    metavar="N", gt=0)
    batch_size: int = setting(32, "global batch size (all ranks together), per batch", group=OPTIMISATION, gt=0)
    accumulate_grad_batches: int = setting(1, "batches per optimizer step (gradient accumulation; each batch is one "
                                              "task's)", group=OPTIMISATION, metavar="K", gt=0)
    eval_batch_size: int = setting(64, "dev batch size per rank", group=OPTIMISATION, gt=0)
    lr: float = setting(5e-5, "peak learning rate (AdamW), in (0, 1]", group=OPTIMISATION, gt=0, le=1,
                        allow_inf_nan=False)
    weight_decay: float = setting(0.01, "AdamW weight decay (not on biases, LayerNorm)", group=OPTIMISATION, ge=0,
                                  allow_inf_nan=False)
    warmup_ratio: float = setting(0.1, "fraction of steps with linear warm-up", group=OPTIMISATION, ge=0, lt=1,
                                  allow_inf_nan=False)
    gradient_clip: float = setting(1.0, "max gradient norm (0: none)", group=OPTIMISATION, ge=0, allow_inf_nan=False)
    max_length: int | None = setting(None, "override every task's max sequence length (default: each task's, 128 in "
                                           "glue.yaml)", group=OPTIMISATION, cli_type="max_length",
                                     ge=MAX_LENGTH_RANGE[0], le=MAX_LENGTH_RANGE[1])
    dropout: float | None = setting(None, "override every dropout probability, encoder and heads (default: the "
                                          "encoder's and tasks')", group=OPTIMISATION, ge=0, lt=1, allow_inf_nan=False)
    # task schedule and data
    schedule: Literal["proportional", "temperature", "uniform"] = setting(
        "proportional", "task schedule: proportional = MT-DNN Algorithm 1", group=OPTIMISATION)
    temperature: float = setting(2.0, "T of temperature sampling, p_t ~ n_t^(1/T) (only with --schedule temperature)",
                                 group=OPTIMISATION, gt=0, allow_inf_nan=False)
    seed: int = setting(42, "seed of initialisation, dropout and (without --data-seed) the schedule and data order",
                        group=OPTIMISATION, cli_type="int", ge=0, le=SEED_MAX)
    data_seed: int | None = setting(None, "seed of the task schedule and data order alone (default: --seed)",
                                    group=OPTIMISATION, cli_type="int", ge=0, le=SEED_MAX)
    limit_train_examples: int | None = setting(None, "use the first N rows of each task's train split",
                                               group=OPTIMISATION, metavar="N", gt=0)
    limit_eval_examples: int | None = setting(None, "score the first N rows of each task's dev split (a quick run; "
                                                    "its default run directory is marked -limited)",
                                              group=OPTIMISATION, metavar="N", gt=0)
    pad_to_multiple_of: int = setting(1, "pad lengths to a multiple (8 on GPU)", group=OPTIMISATION, gt=0)
    group_by_length: bool = setting(True, "length-grouped batches: each chunk of 50 batches' rows sorted by length, "
                                          "then cut (less padding; the order of batches stays random); "
                                          "--no-group-by-length: random batches, as a Hugging Face Trainer's default",
                                    group=OPTIMISATION)
    # dev evaluation and model selection
    eval_every_n_steps: int | None = setting(None, "score dev every N optimizer steps instead of at epoch ends; the "
                                                   "best of these is kept", group=EVALUATION, metavar="N", gt=0)
    early_stopping_patience: int | None = setting(None, "stop when the dev average has not improved for P "
                                                        "evaluations (default: never)", group=EVALUATION,
                                                  metavar="P", gt=0)
    # Lightning Trainer (engineering)
    accelerator: str = setting("auto", "cpu, gpu, cuda, mps or auto", group=LIGHTNING)
    devices: int | str = setting("auto", "number of devices, a list like 0,1, or auto", group=LIGHTNING,
                                 cli_type="devices")
    strategy: str = setting("auto", "auto, ddp (mapped to DDP with find_unused_parameters=True: each step leaves "
                                    "other tasks' heads unused), ddp_spawn, ...", group=LIGHTNING)
    num_nodes: int = setting(1, "nodes for multi-node DDP", group=LIGHTNING, gt=0)
    precision: str = setting("32-true", "32-true, bf16-mixed or 16-mixed (GPU), bf16-true", group=LIGHTNING)
    num_workers: int = setting(0, "DataLoader worker processes", group=LIGHTNING, cli_type="int", ge=0)
    export_hf: bool = setting(True, "also write export/hf/<task>/, a Hugging Face AutoModelFor... folder for each task "
                                    "whose head is the family's own (a full copy of the encoder each, about 90 MB for "
                                    "MiniLM); --no-export-hf: the toolkit's export only (teacher members: off unless "
                                    "their finetune: sets it)")
    keep_last_checkpoint: bool = setting(False, "keep checkpoints/last.ckpt (weights and optimizer state, for "
                                                "--resume) when the run completes; by default it is removed, and "
                                                "best.ckpt holds the weights only", group=LIGHTNING)
    compile: str | None = setting(None, "torch.compile the encoder, in place so checkpoints keep their parameter "
                                        "names (backend default: inductor)", group=LIGHTNING, metavar="BACKEND",
                                  cli_type="optional:inductor")
    deterministic: bool = setting(False, "deterministic algorithms only (torch.use_deterministic_algorithms; "
                                         "reproducible reruns)", group="late")
    # speed (see mtdnn.training.speed)
    length_buckets: list[int] | None = setting(None, "pad every batch to the shortest of these lengths that holds it: "
                                                     "with --compile, one graph per bucket (e.g. 32,64,96,128)",
                                               group=SPEED, metavar="L1,L2,...", cli_type="buckets", min_length=1)
    cuda_graphs: bool = setting(False, "record CUDA graphs per bucket (GPU; needs --compile inductor and "
                                       "--length-buckets)", group=SPEED)
    sdpa_backend: Literal["auto", "efficient", "math"] = setting(
        "auto", "attention kernels: efficient = flash/memory-efficient, never cuDNN (no plan per shape)", group=SPEED)

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


RUN_FIELDS = ("task_defs", "tasks", "data_dir", "encoder", "init_from", "output_dir")
"""Fields a command sets for each run it trains (a teacher member's task and directory, ...), never a spec."""
LIGHTNING_FIELDS = tuple(n for n, f in TrainConfig.model_fields.items()
                         if ((f.json_schema_extra or {}).get("cli") or {}).get("group") == LIGHTNING)
"""The Lightning Trainer fields: given on the command line of each command, for every run it trains."""


class Overrides(BaseModel):
    """Base of the override models of :func:`overrides_model`: strict types, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _valid_together(self):
        """The fields given must make a valid :class:`TrainConfig` together (its own cross-field rules)."""
        token = _RAW_ERRORS.set(True)  # pydantic's errors, turned into this model's below
        try:
            TrainConfig.model_validate({"task_defs": "-", **self.model_dump(exclude_unset=True)})
        except ValidationError as err:
            raise ValueError("; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())) from None
        finally:
            _RAW_ERRORS.reset(token)
        return self

    def given(self) -> dict:
        """The fields the spec sets, as written (the others are :class:`TrainConfig`'s defaults)."""
        return self.model_dump(exclude_unset=True)


def overrides_model(name: str, exclude: tuple[str, ...], doc: str) -> type[Overrides]:
    """A model of overrides of :class:`TrainConfig` fields (a teacher spec's ``finetune:``, a student spec's
    ``train:``): every field of ``TrainConfig`` but ``exclude``, with the same names, types, ranges, defaults and
    help texts (the very ``Field`` objects), validated together by ``TrainConfig``'s own rules. Nothing about a
    setting is declared twice."""
    fields = {n: (f.annotation, f) for n, f in TrainConfig.model_fields.items() if n not in exclude}
    floats = [n for n in ("lr", "weight_decay", "warmup_ratio", "gradient_clip", "dropout", "temperature")
              if n in fields]
    validators = {"_floats": field_validator(*floats, mode="before")(lambda cls, value: yaml_float(value))}
    model = create_model(name, __base__=Overrides, __validators__=validators, **fields)
    model.__doc__ = doc
    return model


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
