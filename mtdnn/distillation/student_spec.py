"""The student spec (``students/*.yaml``): the student's tasks, its starting point, the distillation loss's
temperature and alpha, and its training settings (overrides of :class:`~mtdnn.training.config.TrainConfig`)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ..fileio import yaml_float
from ..training.config import LIGHTNING_FIELDS, RUN_FIELDS, overrides_model
from .specs import Spec


class InitSpec(Spec):
    """The student's starting point.

    ``encoder``: ``pretrained`` (the encoder the multi-task run started from; default), ``multitask`` (the
    multi-task run's encoder and the heads of matching tasks), or any Hugging Face name or path; never a teacher
    member. ``layers``: keep only these 0-based encoder layers (DistilBERT-style, Sanh et al. 2019,
    arXiv 1910.01108), e.g. ``[0, 2, 4]`` of a 6-layer encoder; not for ALBERT, whose layers share one set of
    weights. ``num_layers``: keep the first N layers; for ALBERT, run its shared layer N times.
    """

    encoder: str = "pretrained"
    layers: list[int] | None = Field(default=None, min_length=1)
    num_layers: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_layer_choice(self) -> "InitSpec":
        if self.layers is not None and self.num_layers is not None:
            raise ValueError("fields 'layers', 'num_layers': give one of them (a layer list or a layer count)")
        return self


StudentTrainSpec = overrides_model(
    "StudentTrainSpec", RUN_FIELDS + LIGHTNING_FIELDS + ("trust_remote_code",),
    """A student spec's ``train:``: overrides of the :class:`~mtdnn.training.config.TrainConfig` fields of the same
    names (validated by it; ``temperature`` is the task-sampling temperature, the distillation T is the spec's own
    ``temperature``); the Lightning settings come from the command line.""")


class StudentSpec(Spec):
    """A student spec (``students/*.yaml``); relative paths are relative to the working directory.

    ``distill``: tasks trained on soft targets and gold labels; ``gold``: tasks trained on gold labels only;
    ``temperature`` T > 0 and ``alpha`` in [0, 1] of the distillation loss; ``loss_weights``: per-task factors
    replacing the task definitions' ``loss_weight``; ``teachers``: the teacher directory; ``from_run``: the
    multi-task run for ``init`` (default: the one the teachers started from).
    """

    task_defs: str
    teachers: str | None = None
    from_run: str | None = None
    output_dir: str
    init: InitSpec = InitSpec()
    distill: list[str] = []
    gold: list[str] = []
    temperature: float = Field(default=1.0, gt=0)
    alpha: float = Field(default=0.5, ge=0, le=1)
    loss_weights: dict[str, float] = {}
    train: StudentTrainSpec = StudentTrainSpec()

    @field_validator("train", mode="before")
    @classmethod
    def _renamed(cls, value):
        if isinstance(value, dict) and "sampling_temperature" in value:
            raise ValueError("'sampling_temperature' is now 'temperature' (train: holds TrainConfig fields, by their "
                             "names; the distillation temperature T is the spec's own top-level 'temperature')")
        return value

    @field_validator("temperature", "alpha", mode="before")
    @classmethod
    def _floats(cls, value):
        return yaml_float(value)

    @field_validator("loss_weights", mode="before")
    @classmethod
    def _weights(cls, value):
        return {k: yaml_float(v) for k, v in value.items()} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _tasks(self) -> "StudentSpec":
        if not self.distill and not self.gold:
            raise ValueError("fields 'distill', 'gold': give at least one task")
        both = sorted(set(self.distill) & set(self.gold))
        if both:
            raise ValueError(f"fields 'distill', 'gold': task(s) {', '.join(both)} listed under both")
        names = self.distill + self.gold
        if len(set(names)) != len(names):
            raise ValueError(f"fields 'distill', 'gold': a task is listed twice ({names})")
        for name, weight in self.loss_weights.items():
            if name not in names:
                raise ValueError(f"field 'loss_weights.{name}': task '{name}' is not under distill or gold")
            if weight < 0:
                raise ValueError(f"field 'loss_weights.{name}': must be >= 0 (got {weight})")
        return self
