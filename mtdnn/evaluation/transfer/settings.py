"""The fine-tuning hyper-parameters of few-shot transfer: one place, the same for every encoder, size and seed."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from ...training.config import TrainConfig


@dataclass(frozen=True)
class TransferSettings:
    """The fine-tuning hyper-parameters: one place, the same for every encoder, size and seed, and reported.

    MT-DNN's fine-tuning settings (arXiv 1901.11504, section 4): 3 epochs, AdamW with lr 5e-5, linear warm-up
    over 10% of the steps then linear decay; batch 8 for the small subsets, 32 above. The rule used here: a
    subset of fewer than ``small_subset_limit`` (1000) examples trains with batch 8, a larger one with 32.
    The training seed of seed index s is s (head initialisation, dropout and batch order); subset orders use
    the same s in their own generator.
    """

    train: dict = field(default_factory=dict)
    small_batch_size: int = 8
    large_batch_size: int = 32
    small_subset_limit: int = 1000

    TRAIN_DEFAULTS = {"eval_batch_size": 128}
    """Where transfer's training settings differ from :class:`~mtdnn.training.config.TrainConfig`'s defaults
    (which are MT-DNN's fine-tuning settings: 3 epochs, lr 5e-5, weight decay 0.01, warm-up 10%, clipping 1)."""
    TRAIN_FIELDS = ("max_epochs", "lr", "weight_decay", "warmup_ratio", "gradient_clip", "eval_batch_size")
    """The training settings a transfer fine-tune takes from ``train`` (:class:`~mtdnn.training.config.TrainConfig`
    fields, by their names; readable as attributes: ``settings.max_epochs``); the batch-size rule
    (``small_batch_size``, ``large_batch_size``, ``small_subset_limit``) is transfer's own."""

    def __post_init__(self) -> None:
        """``train`` is validated by :class:`~mtdnn.training.config.TrainConfig` itself (ConfigError naming the
        field); only :data:`TRAIN_FIELDS` may be given (the others are the pipeline's, per fine-tune)."""

        other = sorted(set(self.train) - set(self.TRAIN_FIELDS))
        if other:
            raise ConfigError(f"transfer settings: field 'train.{other[0]}': not a transfer setting (give "
                              f"{', '.join(self.TRAIN_FIELDS)})")
        config = TrainConfig(task_defs="transfer", **{**self.TRAIN_DEFAULTS, **self.train})
        object.__setattr__(self, "_config", config)
        for n in (self.small_batch_size, self.large_batch_size):
            TrainConfig(task_defs="transfer", batch_size=n)

    def __getattr__(self, name: str):
        if name in TransferSettings.TRAIN_FIELDS:
            return getattr(self.__dict__["_config"], name)
        raise AttributeError(name)

    def train_overrides(self, n_examples: int) -> dict:
        """The :class:`~mtdnn.training.config.TrainConfig` fields of one fine-tune on ``n_examples`` examples."""
        return {**{k: getattr(self, k) for k in self.TRAIN_FIELDS}, "batch_size": self.batch_size(n_examples)}

    def record(self) -> dict:
        """The settings as the sweep's records and report hold them (``epochs`` for ``max_epochs``: the name they
        had before the schema was one), so that records written earlier are still found and reused."""
        return {"epochs": self.max_epochs, "lr": self.lr, "weight_decay": self.weight_decay,
                "warmup_ratio": self.warmup_ratio, "gradient_clip": self.gradient_clip,
                "small_batch_size": self.small_batch_size, "large_batch_size": self.large_batch_size,
                "small_subset_limit": self.small_subset_limit, "eval_batch_size": self.eval_batch_size}

    def batch_size(self, n_examples: int) -> int:
        """The training batch for a subset of ``n_examples``."""
        return self.small_batch_size if n_examples < self.small_subset_limit else self.large_batch_size

    @property
    def batch_size_rule(self) -> str:
        return (f"batch {self.small_batch_size} when the subset has fewer than {self.small_subset_limit} examples, "
                f"else {self.large_batch_size}")

    def describe(self) -> str:
        lr = f"{self.lr:.0e}".replace("e-0", "e-")
        return (f"{self.max_epochs} epochs, AdamW lr {lr} (weight decay {self.weight_decay:g}, none on biases and "
                f"LayerNorm), linear warm-up over {self.warmup_ratio:.0%} of the steps then linear decay, "
                f"{self.batch_size_rule}, gradient clipping {self.gradient_clip:g}")


SETTINGS = TransferSettings()
