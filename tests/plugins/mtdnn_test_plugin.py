"""Test-only Lightning callbacks, added to every ``pl.Trainer`` of a test process (never by production code).

- ``$MTDNN_FAULT_AT_STEP=N``: send this process SIGTERM once N optimizer steps are done (after the step's dev
  evaluation, if it has one): tests of interruption and exact resume use a fixed step, never a timer.
- ``$MTDNN_TRACE_DIR=DIR``: every rank writes ``DIR/trace-rank<r>.jsonl``: per batch the epoch, step, task and the
  real example rows it trained on (the DDP tests compare them).

:func:`install` wraps ``pytorch_lightning.Trainer.__init__`` so that the callbacks come first (before the
toolkit's :class:`~mtdnn.training.stopping.SaveLastCheckpoint`, which then sees the signal at the same step).
``tests/conftest.py`` installs it in the test process; ``tests/plugins/sitecustomize.py`` in subprocesses (DDP
ranks included) whose ``PYTHONPATH`` holds ``tests/plugins``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

FAULT_ENV = "MTDNN_FAULT_AT_STEP"
TRACE_ENV = "MTDNN_TRACE_DIR"


def _callbacks() -> list:
    import pytorch_lightning as pl

    class FaultAtStep(pl.Callback):
        """SIGTERM to this process after optimizer step ``step`` (after its dev evaluation when one follows)."""

        def __init__(self, step: int):
            self.step, self.pending, self.done = step, False, False

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = trainer.global_step
            stopping = bool(getattr(trainer._signal_connector, "requested", False) or trainer.received_sigterm)
            if step != self.step or self.done or self.pending or stopping:
                return
            every = trainer.val_check_batch if trainer.check_val_every_n_epoch is None else None
            evaluates = isinstance(every, int) and every > 0 and \
                step % max(1, every // trainer.accumulate_grad_batches) == 0
            if evaluates:
                self.pending = True  # after this step's dev evaluation (on_validation_end)
            else:
                self.done = True
                os.kill(os.getpid(), signal.SIGTERM)

        def on_validation_end(self, trainer, pl_module):
            if self.pending and not trainer.sanity_checking:
                self.pending, self.done = False, True
                os.kill(os.getpid(), signal.SIGTERM)

    class TraceSteps(pl.Callback):
        """Per training batch: epoch, step, task and the real rows (weight > 0)."""

        def __init__(self, directory: Path):
            self.directory, self.rows = directory, []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            real = batch.idx[batch.weight > 0].tolist()
            self.rows.append({"epoch": trainer.current_epoch, "step": trainer.global_step, "task": batch.task,
                              "rows": real})

        def on_train_end(self, trainer, pl_module):
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / f"trace-rank{trainer.global_rank}.jsonl", "a", encoding="utf-8") as out:
                out.writelines(json.dumps(r) + "\n" for r in self.rows)

    found = []
    if os.environ.get(FAULT_ENV):
        found.append(FaultAtStep(int(os.environ[FAULT_ENV])))
    if os.environ.get(TRACE_ENV):
        found.append(TraceSteps(Path(os.environ[TRACE_ENV])))
    return found


def install() -> None:
    """Add the test callbacks to every ``pl.Trainer`` built from now on in this process (idempotent)."""
    import pytorch_lightning as pl

    init = pl.Trainer.__init__
    if getattr(init, "mtdnn_test_plugin", False):
        return

    def patched(self, *args, callbacks=None, **kwargs):
        extra = _callbacks()
        if extra:
            callbacks = [*extra, *(callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else [])]
        init(self, *args, callbacks=callbacks, **kwargs)

    patched.mtdnn_test_plugin = True
    pl.Trainer.__init__ = patched
