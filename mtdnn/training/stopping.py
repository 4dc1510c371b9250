"""Stopping safely: SIGTERM under DDP (every rank stops at the same step boundary), a lost peer, the watchdog.

Engineering, not research: :func:`mtdnn.training.pipeline.execute` installs :func:`graceful_stop_connector` on the
run's Trainer and :class:`SaveLastCheckpoint` among its callbacks.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import lightning_fabric.strategies.launchers.subprocess_script as fabric_launcher
import pytorch_lightning as pl
import pytorch_lightning.strategies.launchers.subprocess_script as pl_launcher
import torch
from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

from ..errors import SIGTERM_EXIT_CODE
from .rng import save_rank_rng

log = logging.getLogger("mtdnn.train")


STOP_GRACE_ENV = "MTDNN_SIGTERM_GRACE_S"


STOP_GRACE_S = 40.0
"""After SIGTERM (or after the ranks agreed to stop), a rank still running this many seconds later exits 143 at
once, saving nothing more: the ranks never met at a step boundary (a peer died or hangs). ``$MTDNN_SIGTERM_GRACE_S``
changes it."""


def stop_grace_s() -> float:
    """:data:`STOP_GRACE_S`, or ``$MTDNN_SIGTERM_GRACE_S`` when it is a positive number."""
    try:
        value = float(os.environ.get(STOP_GRACE_ENV, ""))
    except ValueError:
        return STOP_GRACE_S
    return value if math.isfinite(value) and value > 0 else STOP_GRACE_S


def graceful_stop_connector(trainer, last_checkpoint: Path):
    """A replacement for Lightning's signal connector (``trainer._signal_connector``) that makes SIGTERM safe
    under DDP.

    Lightning's own SIGTERM handler broadcasts from rank 0 inside the handler, a collective that only the signalled
    ranks enter: with SIGTERM to every rank at once (SLURM, Kubernetes) the ranks wait for each other in different
    collectives and hang. Here the handler only records the request (``requested``), forwards the signal to the
    local ranks this process launched, and arms a watchdog; the ranks agree to stop in :class:`SaveLastCheckpoint`
    with an all-reduce that runs at every optimizer step and every dev evaluation end whether or not a signal came,
    and only then is ``received_sigterm`` (what Lightning's loops check) set, on every rank at the same point.
    The watchdog ends the process with exit code 143 :func:`stop_grace_s` seconds after the signal or the agreement
    if it is still running; a signal arriving while the main thread waits inside a collective still arms it (a
    wake-up file descriptor read by a thread).
    """

    class GracefulStop(_SignalConnector):
        def __init__(self):
            super().__init__(trainer)
            self.requested = False
            self._lock = threading.RLock()  # re-entrant: a second SIGTERM may interrupt the first's handler
            self._cancelled = threading.Event()
            self._watchdog = None
            self._wakeup = None

        def register_signal_handlers(self) -> None:
            super().register_signal_handlers()  # SIGUSR1 and SLURM's requeue as Lightning; SIGTERM replaced below
            if threading.current_thread() is not threading.main_thread():
                return
            signal.signal(signal.SIGTERM, self._on_sigterm)
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            try:
                previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            except ValueError:
                os.close(read_fd), os.close(write_fd)
                return
            self._wakeup = (read_fd, write_fd, previous)
            threading.Thread(target=self._read_wakeups, args=(read_fd,), daemon=True,
                             name="mtdnn-sigterm-wakeup").start()

        def _read_wakeups(self, read_fd: int) -> None:
            while True:
                try:
                    data = os.read(read_fd, 64)
                except OSError:
                    return
                if not data or 0 in data:  # teardown's sentinel
                    os.close(read_fd)
                    return
                if signal.SIGTERM in data:  # the main thread may be blocked in a collective: arm the watchdog
                    self.requested = True
                    self.arm_watchdog("SIGTERM")

        def _on_sigterm(self, signum, frame) -> None:
            first = not self.requested
            self.requested = True
            if first:
                log.info("rank %d: SIGTERM received: stopping at the next step boundary (or the end of this dev "
                         "evaluation) once every rank has it", trainer.global_rank)
                launcher = trainer.strategy.launcher
                if launcher is not None and hasattr(launcher, "procs"):
                    launcher.kill(signum)  # the local ranks this process launched
            self.arm_watchdog("SIGTERM")

        def agreed(self) -> None:
            """Every rank agreed to stop: Lightning's loops stop at their next check, on every rank alike."""
            self.received_sigterm = True
            self.arm_watchdog("the ranks agreed to stop")

        def arm_watchdog(self, why: str) -> None:
            with self._lock:
                if self._watchdog is not None:
                    return
                self._watchdog = threading.Thread(target=self._watch, args=(why, stop_grace_s()), daemon=True,
                                                  name="mtdnn-sigterm-watchdog")
                self._watchdog.start()

        def _watch(self, why: str, grace: float) -> None:
            if self._cancelled.wait(grace):
                return
            kept = (f"resume with --resume (from {last_checkpoint})" if last_checkpoint.is_file()
                    else "no checkpoint was saved yet")
            sys.stderr.write(f"interrupted: rank {trainer.global_rank}: still running {grace:g} s after {why}: the "
                             f"ranks never met at a step boundary (another rank died or hangs); exiting without "
                             f"saving more; {kept}; no metrics.json written\n")
            sys.stderr.flush()
            os._exit(SIGTERM_EXIT_CODE)

        def cancel_watchdog(self) -> None:
            """The stop completed in order (single process): the watchdog must not end the caller's process."""
            self._cancelled.set()

        def teardown(self) -> None:
            if self._wakeup is not None and threading.current_thread() is threading.main_thread():
                read_fd, write_fd, previous = self._wakeup
                self._wakeup = None
                signal.set_wakeup_fd(previous)
                try:
                    os.write(write_fd, b"\0")
                except OSError:
                    pass
                os.close(write_fd)
            super().teardown()

    return GracefulStop()


def install_patient_process_observer() -> None:
    """Make Lightning's launcher watch its local ranks patiently.

    Lightning's observer thread SIGKILLs the launching process (rank 0) within 5 s of any local rank exiting with a
    non-zero code, 143 included: after a SIGTERM agreed by every rank, rank 0 could be killed while it saves or
    reports. This one first gives rank 0 :func:`stop_grace_s` seconds to end by itself (after an agreed stop it
    exits 143; after a rank's death its next collective fails and it stops with one message), then does as
    Lightning's.
    """

    if getattr(pl_launcher._launch_process_observer, "mtdnn_patient", False):
        return

    class PatientObserver(fabric_launcher._ChildProcessObserver):
        def _terminate_all(self) -> None:
            time.sleep(stop_grace_s() + 5)  # a daemon thread: it ends with rank 0's process
            super()._terminate_all()

    def launch(child_processes) -> None:
        PatientObserver(child_processes=child_processes, main_pid=os.getpid()).start()

    launch.mtdnn_patient = True
    pl_launcher._launch_process_observer = launch


def stop_requested(trainer) -> bool:
    """Whether this rank received SIGTERM (:func:`graceful_stop_connector`) or Lightning's own flag is set."""
    connector = trainer._signal_connector
    return bool(getattr(connector, "requested", False) or trainer.received_sigterm)


def agree_to_stop(trainer) -> bool:
    """Whether any rank asked to stop; every rank calls this at the same points of every run (an all-reduce of
    one int32 under DDP, whether or not a signal came)."""
    local = stop_requested(trainer)
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        flag = torch.tensor([1 if local else 0], dtype=torch.int32, device=trainer.strategy.root_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())
    return local


def validation_follows(trainer) -> bool:
    """Whether Lightning runs a dev evaluation right after this training batch (the same on every rank)."""
    loop = trainer.fit_loop.epoch_loop
    try:
        return bool(loop._should_check_val_fx(trainer.fit_loop._data_fetcher))
    except Exception:  # noqa: BLE001 - a Lightning without these internals: stop at once, as before
        return False


class SaveLastCheckpoint(pl.Callback):
    """``last.ckpt`` for faults and resumption (engineering, not research).

    - Every ``every_n_steps`` optimizer steps, save ``last_checkpoint`` at the end of the step (atomically). When
      the step ends with a dev evaluation, the checkpoint is saved again after it, so that a resumed run neither
      loses nor repeats that evaluation. With gradient accumulation a checkpoint is saved once per optimizer step,
      after the batch that completed it (never in the middle of an accumulation).
    - SIGTERM (a scheduler pre-empting the job) to any rank, some or all: at the end of every optimizer step and of
      every dev evaluation the ranks all-reduce whether one of them received it (:func:`agree_to_stop`); once they
      agree, every rank saves ``last_checkpoint`` (rank 0 writes it) and stops there. A signal in the middle of an
      accumulation stops at the end of that optimizer step; one during a dev evaluation, or in a step that ends
      with one, stops after the evaluation, which the checkpoint then holds. See :func:`graceful_stop_connector`
      for the watchdog.
    - Every rank writes its own RNG states to ``rng-rank<r>.pt`` beside ``last_checkpoint`` whenever it is saved
      (:func:`~mtdnn.training.rng.save_rank_rng`), so that a resumed DDP run draws the same dropout masks on every
      rank.

    Args:
        last_checkpoint: the path of ``last.ckpt``.
        every_n_steps: optimizer steps between saves (None: epoch ends and SIGTERM only).
    """

    def __init__(self, last_checkpoint: Path, every_n_steps: int | None = None):
        self.last_checkpoint, self.every_n_steps = Path(last_checkpoint), every_n_steps
        self.saved_step = -1
        self.seen_step, self.stopping, self.stop_after_evaluation = None, False, False

    def state_dict(self) -> dict:
        """The step last saved (plain values: the checkpoint loads with ``weights_only=True``)."""
        return {"saved_step": int(self.saved_step)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.saved_step = int(state_dict.get("saved_step", -1))

    def on_train_start(self, trainer, pl_module):
        self.seen_step = trainer.global_step

    def stop(self, trainer) -> None:
        trainer.save_checkpoint(self.last_checkpoint)
        self.saved_step = trainer.global_step
        connector = trainer._signal_connector
        if hasattr(connector, "agreed"):
            connector.agreed()
        else:  # Lightning's own connector (a Trainer not built by the pipeline)
            connector.received_sigterm = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        new_step = step != self.seen_step
        self.seen_step = step
        if new_step and self.stop_after_evaluation:  # the evaluation did not come after all
            self.stop_after_evaluation = False
            self.stop(trainer)
            return
        if new_step and not self.stopping and agree_to_stop(trainer):  # at optimizer step boundaries only
            self.stopping = True
            if validation_follows(trainer):
                self.stop_after_evaluation = True  # the checkpoint then holds the evaluation
            else:
                self.stop(trainer)
                return
        if self.every_n_steps and new_step and step % self.every_n_steps == 0:
            trainer.save_checkpoint(self.last_checkpoint)
            self.saved_step = step

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        if self.stop_after_evaluation or (not self.stopping and agree_to_stop(trainer)):
            self.stopping, self.stop_after_evaluation = True, False
            self.stop(trainer)  # with this evaluation in it
        elif self.saved_step == trainer.global_step:
            trainer.save_checkpoint(self.last_checkpoint)  # with this evaluation in it
            self.saved_step = trainer.global_step

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):  # full checkpoints only: last.ckpt
        # the world size it was saved by: resuming with another is refused (mtdnn.training.resume.check_world_size)
        checkpoint.setdefault("mtdnn", {})["world_size"] = trainer.world_size
        save_rank_rng(self.last_checkpoint.parent, trainer.global_rank, trainer.world_size, checkpoint["global_step"])


PEER_FAILURE_MARKERS = ("connection closed by peer", "connection reset by peer", "broken pipe", "gloo", "nccl",
                        "socket closed", "connection refused", "timed out")


def is_peer_failure(err: BaseException) -> bool:
    """Whether ``err`` is a collective failing because another rank went away (torch.distributed's errors, or the
    communication library's RuntimeError naming the lost connection)."""

    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(m in text for m in PEER_FAILURE_MARKERS)
