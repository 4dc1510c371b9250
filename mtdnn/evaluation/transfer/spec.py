"""``TransferSpec``: every setting of a few-shot transfer sweep (``python -m mtdnn.transfer``'s flags, by name)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class TransferSpec(BaseModel):
    """A transfer sweep: the task, the encoders compared, the subset sizes and seeds, where results go.

    ``encoders``: ``[label=]encoder`` items (``packaged-minilm``, a Hugging Face name or path, or a run directory or
    export of this toolkit). ``sizes`` (examples) and/or ``fractions`` (of the pool, in (0, 1]); ``seeds``: seed
    indices 0..N-1. ``reuse_head``: for run encoders, start from the run's head of this task ("" means ``task``)
    instead of a fresh one. ``note``: lines added to the report. The fine-tuning hyper-parameters are
    :class:`~mtdnn.evaluation.transfer.settings.TransferSettings`, the same for every run.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    task: str
    encoders: list[str]
    task_defs: str = "task_defs/glue.yaml"
    sizes: list[int] | None = None
    fractions: list[float] | None = None
    seeds: int = Field(default=3, gt=0)
    data_dir: str | None = None
    output_dir: str | None = None
    pool_split: str | None = None
    eval_split: str | None = None
    reuse_head: str | None = None
    limit_eval_examples: int | None = Field(default=None, gt=0)
    note: list[str] = []
    fresh: bool = False
    accelerator: str = "auto"
    precision: str = "32-true"
    trust_remote_code: bool = False

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value):
        bad = [v for v in value or [] if v <= 0]
        if value is not None and (not value or bad):
            raise ValueError(f"a size must be a positive number of examples (got {bad[0] if bad else value})")
        return value

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value):
        bad = [v for v in value or [] if not 0 < v <= 1]
        if value is not None and (not value or bad):
            raise ValueError(f"a fraction must be in (0, 1] (got {bad[0] if bad else value})")
        return value

    @model_validator(mode="after")
    def _some_size(self) -> "TransferSpec":
        if self.sizes is None and self.fractions is None:
            raise ValueError("give --sizes (examples) or --fractions (of the pool), or both")
        return self
