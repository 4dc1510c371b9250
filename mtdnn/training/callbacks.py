"""The engineering of a training run as Lightning callbacks, each with its own ``state_dict``.

- :class:`NonFiniteGuard`: a non-finite loss or gradient norm stops training (``TrainingDiverged``), read without a
  host-device synchronisation in the training step;
- :class:`ResumeRNG`: the RNG states saved with ``last.ckpt`` and restored before the first step after a resume, so
  that a resumed run draws the dropout masks of an uninterrupted one (every DDP rank its own, ``rng-rank<r>.pt``);
- :class:`EvaluateAtMaxSteps`: the step where ``--max-steps`` stops the run ends with a dev evaluation.

:func:`mtdnn.training.pipeline.execute` adds them to the run's Trainer; SIGTERM and ``last.ckpt`` are in
:mod:`mtdnn.training.stopping`.
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch

from .rng import load_rank_rng, rng_state, set_rng_state


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient norm was seen during training (see :class:`NonFiniteGuard`)."""


class NonFiniteGuard(pl.Callback):
    """Stop training on a non-finite loss or gradient norm, without synchronising in the training step.

    Each batch's loss (``outputs["loss"]``) and the gradient norm the module computed while clipping
    (``pl_module.grad_norm``, a 0-d tensor, see
    :meth:`~mtdnn.training.module.MultiTaskModule.configure_gradient_clipping`) are OR-ed into a device-side flag
    ``not isfinite(x)``; the host reads it (one synchronisation) only at logging intervals, at the end of training
    and before a checkpoint is saved, so that a checkpoint never holds a diverged model (raising there keeps the
    previous file). With a gradient scaler (``16-mixed``) non-finite gradients are expected (the scaler skips the
    step), so only the loss is flagged there.

    Raises:
        TrainingDiverged: from those hooks, once the flag is set.
    """

    def __init__(self):
        self.flag: torch.Tensor | None = None

    def state_dict(self) -> dict:
        """``{"nonfinite": False}``: a checkpoint is saved only when no non-finite value was seen."""
        return {"nonfinite": bool(self.flag) if self.flag is not None else False}

    def load_state_dict(self, state_dict: dict) -> None:
        self.flag = None  # a checkpoint is never saved with the flag set

    def mark(self, value: torch.Tensor) -> None:
        """OR ``not isfinite(value)`` (a scalar tensor) into the device-side flag, without synchronising."""
        bad = ~torch.isfinite(value.detach())
        if self.flag is None or self.flag.device != bad.device:
            self.flag = torch.zeros((), dtype=torch.bool, device=bad.device)
        self.flag.logical_or_(bad)

    def check(self, trainer, when: str) -> None:
        """Read the flag (one synchronisation).

        Raises:
            TrainingDiverged: the flag is set; ``when`` says at which point it was read.
        """
        if self.flag is not None and bool(self.flag):
            raise TrainingDiverged(f"training diverged: a non-finite loss or gradient norm was seen at or before "
                                   f"optimizer step {trainer.global_step} (read {when}); lower --lr, keep "
                                   f"--gradient-clip on, or use a wider --precision")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self.mark(loss)
        norm = getattr(pl_module, "grad_norm", None)
        if isinstance(norm, torch.Tensor):
            if getattr(trainer.precision_plugin, "scaler", None) is None:
                self.mark(norm)
            pl_module.grad_norm = None
        if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
            self.check(trainer, "at a logging interval")

    def on_train_end(self, trainer, pl_module) -> None:
        self.check(trainer, "at the end of training")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.check(trainer, "before saving a checkpoint")


class ResumeRNG(pl.Callback):
    """Python, NumPy, torch CPU and CUDA RNG states in every checkpoint (:func:`~mtdnn.training.rng.rng_state`),
    restored just before the first training step after a resume: nothing between a save and the next step draws
    random numbers, so dropout continues as in an uninterrupted run.

    Under DDP each rank restores its own states from ``rng-rank<r>.pt`` beside the checkpoint (written by
    :class:`~mtdnn.training.stopping.SaveLastCheckpoint`); the checkpoint's own are rank 0's. Checkpoints written
    before this callback existed keep them under ``checkpoint["mtdnn"]["rng"]``, which is read back too.
    """

    def __init__(self):
        self.pending: dict | None = None
        self._rank_own: dict | None = None

    def state_dict(self) -> dict:
        """This process's RNG states (tensors and plain values: loadable with ``weights_only=True``)."""
        return {"rng": rng_state()}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("rng") is not None:
            self.pending = state_dict["rng"]

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        legacy = checkpoint.get("mtdnn", {}).get("rng")  # written by a version before this callback
        if legacy is not None and self.pending is None:
            self.pending = legacy
        ckpt_path = getattr(trainer, "ckpt_path", None)
        self._rank_own = None
        if ckpt_path and trainer.world_size > 1:  # each rank continues its own random streams (dropout)
            self._rank_own = load_rank_rng(Path(ckpt_path).parent, trainer.global_rank, checkpoint.get("global_step"))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        state = self._rank_own or self.pending
        if state:
            set_rng_state(state)
        self.pending = self._rank_own = None


class EvaluateAtMaxSteps(pl.Callback):
    """Make the optimizer step where ``--max-steps`` stops the run end with a dev evaluation, as an epoch end does
    (Lightning evaluates only at epoch ends or every ``val_check_interval`` batches, so a run stopped between them
    would have nothing to select on).

    It sets ``trainer.should_stop`` after that step's last batch; Lightning then validates before stopping
    (``_TrainingEpochLoop._should_check_val_fx``: "allow validation if requesting to stop"). Every rank computes the
    same condition from the step count, so no collective is needed.
    """

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
            trainer.should_stop = True
