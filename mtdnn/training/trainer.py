"""Multi-task training of one shared encoder (MT-DNN Algorithm 1): :func:`fit` runs a :class:`TrainConfig`.

Example (the command, :mod:`mtdnn.cli.train`, and the API, :func:`mtdnn.fit`, both end here)::

    python -m mtdnn.train task_defs/glue.yaml --data-dir ../shared/data --tasks rte,mrpc,stsb,cola

writes a run directory (see :mod:`mtdnn.training.runs`) with the resolved config, checkpoints, logs, ``schedule.json``,
the export of the best model and, last, ``metrics.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import warnings
from collections import Counter
from pathlib import Path

from ..errors import (RANK_LOST_EXIT_CODE, SIGTERM_EXIT_CODE, CheckpointError, ConfigError, Diverged, Interrupted,
                      RankLost, check_bools)
from ..fileio import (append_lines, make_dir, read_json, read_safetensors, read_yaml,
                      write_json_atomic, write_yaml_atomic)
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from .config import LOGGERS, RESOLVED_KEY, TrainConfig
from .ranks import is_global_zero  # noqa: F401 - re-exported: callers import it from here
from .runs import Run

log = logging.getLogger("mtdnn.train")


def default_output_dir(task_defs: str, tasks: list[str], seed: int, limit_train_examples: int | None = None,
                       limit_eval_examples: int | None = None) -> Path:
    """``runs/<yaml stem>-<task>-<task>...-seed<seed>``: a pure function of the settings (DDP ranks agree).

    A limited run (``limit_train_examples``/``limit_eval_examples``) gets its own directory, suffixed
    ``-limited-train<N>-dev<M>``, so that it never takes the place of a full run that teachers build from.
    A name that would be longer than 255 bytes (many tasks) lists the first tasks, then the number of tasks and a
    digest of the whole list: ``glue-cola-mnli-...-and-120-tasks-<sha1[:10]>-seed42``.
    """
    import hashlib

    from ..fileio import NAME_MAX

    limits = "".join(f"-{what}{n}" for what, n in (("train", limit_train_examples), ("dev", limit_eval_examples)) if n)
    suffix = f"-seed{seed}{'-limited' + limits if limits else ''}"
    stem = Path(task_defs).stem
    name = f"{stem}-{'-'.join(tasks)}{suffix}"
    if len(name.encode()) > NAME_MAX:
        digest = hashlib.sha1("\n".join(tasks).encode()).hexdigest()[:10]
        tail = f"-and-{len(tasks)}-tasks-{digest}{suffix}"
        head = f"{stem}-{'-'.join(tasks)}".encode()[:NAME_MAX - len(tail.encode())].decode(errors="ignore")
        name = head.rsplit("-", 1)[0] + tail
    return Path("runs") / name


def run_limits(run: str | Path) -> dict[str, int]:
    """The ``limit_*_examples`` a training run was made with (its ``config.yaml``); empty for a full run or when
    the run has no configuration (an export directory)."""
    from .runs import CONFIG_FILE

    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        return {}
    config = read_yaml(path, CheckpointError, "run configuration")
    if not isinstance(config, dict):
        return {}
    settings = config.get("args") if isinstance(config.get("args"), dict) else config  # older runs: under args
    return {k: settings[k] for k in ("limit_train_examples", "limit_eval_examples") if settings.get(k)}


def check_trainer_flags(config: TrainConfig) -> None:
    """Check the Lightning settings of ``config`` (see :func:`check_lightning_flags`) before anything is written.

    Raises:
        ConfigError: Lightning rejects the flags.
    """
    check_lightning_flags(accelerator=config.accelerator, devices=config.devices, strategy=config.strategy,
                          precision=config.precision, num_nodes=config.num_nodes)
    check_cpu_processes(config.accelerator, config.devices)


def check_cpu_processes(accelerator: str, devices: int | str) -> None:
    """On the CPU, ``--devices N`` launches N processes: more than the machine's cores is refused (it would only
    oversubscribe them).

    Raises:
        ConfigError: naming ``--devices`` and the core count.
    """
    import torch

    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    cores = os.cpu_count() or 1
    if on_cpu and isinstance(devices, int) and devices > cores:
        raise ConfigError(f"--devices {devices}: on the CPU each device is a process, and this machine has {cores} "
                          f"core(s); use --devices {cores} or fewer")


PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")


def _build_trainer(**flags) -> None:
    import pytorch_lightning as pl

    kwargs = {**flags, "strategy": trainer_strategy(flags.get("strategy", "auto"))}
    pl.Trainer(**kwargs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False)


def valid_precisions(**flags) -> list[str]:
    """The :data:`PRECISIONS` that Lightning accepts together with the other ``flags`` (accelerator, devices...)."""
    valid = []
    logging.disable(logging.INFO)  # Lightning announces each Trainer it builds
    try:
        with warnings.catch_warnings():  # and warns of the precisions it substitutes
            warnings.simplefilter("ignore")
            for precision in PRECISIONS:
                try:
                    _build_trainer(**{**flags, "precision": precision})
                    valid.append(precision)
                except Exception:  # noqa: BLE001 - any refusal means "not valid here"
                    pass
    finally:
        logging.disable(logging.NOTSET)
    return valid


def check_lightning_flags(**flags) -> None:
    """Build (and drop) a Trainer from Lightning flags, so that a bad one fails before any file is written.

    Args:
        flags: Trainer arguments named as the CLI flags (``accelerator``, ``devices``, ``strategy``, ``precision``,
            ``num_nodes``); those given are quoted in the error.

    Raises:
        ConfigError: Lightning rejects the combination; when the precision is what it refuses, the message
            names the precisions it accepts with the other flags.
    """
    try:
        _build_trainer(**flags)
    except Exception as err:  # Lightning raises MisconfigurationException, ValueError, RuntimeError, ...
        shown = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items() if k != "num_nodes")
        message = f"Lightning rejects {shown}: {err}"
        if "precision" in flags:
            others = {k: v for k, v in flags.items() if k != "precision"}
            valid = valid_precisions(**others)
            if valid and flags["precision"] not in valid:
                message += f"; valid precisions here: {', '.join(valid)}"
        raise ConfigError(message) from None


def trainer_strategy(name: str):
    """``ddp`` means DDP with ``find_unused_parameters=True``: each step uses one task head only."""
    if name == "ddp":
        from pytorch_lightning.strategies import DDPStrategy

        return DDPStrategy(find_unused_parameters=True)
    return name


def config_is_global_zero(config: TrainConfig) -> bool:
    """Whether this process is global rank zero of the run ``config`` describes (its devices and nodes;
    :func:`mtdnn.training.ranks.is_global_zero`)."""
    return is_global_zero(config.devices if isinstance(config.devices, int) else None, config.num_nodes)


def schedule_summary(step_log: list[tuple[int, str]], schedule: str, batch_size: int,
                     accumulate_grad_batches: int = 1) -> dict:
    """``schedule.json``: the task of every batch per epoch and the realised batch counts.

    With gradient accumulation an optimizer step is ``accumulate_grad_batches`` consecutive batches (each one
    task's); ``steps`` counts batches.
    """
    epochs = sorted({e for e, _ in step_log})
    per_epoch = []
    for epoch in epochs:
        steps = [t for e, t in step_log if e == epoch]
        per_epoch.append({"epoch": epoch + 1, "steps": steps, "batches_per_task": dict(Counter(steps))})
    summary = {"schedule": schedule, "global_batch_size": batch_size, "steps": len(step_log),
               "batches_per_task": dict(Counter(t for _, t in step_log)), "epochs": per_epoch}
    if accumulate_grad_batches > 1:
        summary["accumulate_grad_batches"] = accumulate_grad_batches
    return summary


def metrics_summary(history: list[dict], best_checkpoint: Path, run_dir: Path, stopped_early: dict | None = None) -> dict:
    """``metrics.json``: dev scores per evaluation and the best one (highest average, first on ties).

    Each entry of ``epochs`` is one dev evaluation (per epoch, or every N steps with ``eval_every_n_steps``).
    """
    best = max(history, key=lambda h: h["average"])  # max keeps the first of equal values
    summary = {"status": "complete", "epochs": history,
               "best": {"epoch": best["epoch"], **({"step": best["step"]} if "step" in best else {}),
                        "checkpoint": str(best_checkpoint.resolve().relative_to(run_dir.resolve())),
                        "tasks": best["tasks"], "average": best["average"]}}
    if stopped_early:
        summary["stopped_early"] = stopped_early
    return summary


def copy_matching_heads(model, export_dir: Path, tasks: dict[str, TaskDef]) -> list[str]:
    """Load the heads of ``export_dir`` whose task name, type and output size match; return their names."""
    from .export import load_export_tasks

    saved_tasks = load_export_tasks(export_dir)
    state = read_safetensors(export_dir / "heads.safetensors")
    copied = []
    for name, task in tasks.items():
        old = saved_tasks.get(name)
        if old is None or old.type != task.type or old.head_type != task.head_type or \
                old.num_outputs != task.num_outputs or old.labels != task.labels:
            continue
        model.heads[name].load_state_dict({k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")})
        copied.append(name)
    return copied


def log_pooling(asked: dict[str, TaskDef], model) -> dict[str, TaskDef]:
    """Log each task's pooling and whether the toolkit chose it; return the model's tasks (pooling resolved).

    ``asked``: the task definitions as written; ``model``: the :class:`~mtdnn.modeling.model.MultiTaskModel` built
    from them, whose ``tasks`` carry the pooling chosen for the encoder (recorded in ``config.yaml`` and the export).
    """
    family = getattr(model.encoder.config, "model_type", type(model.encoder).__name__)
    for name, task in model.tasks.items():
        how = f"chosen for the {family} encoder" if asked[name].head.pooling is None else "set by the task"
        log.info("task '%s': head.pooling %s (%s)", name, task.head.pooling, how)
    return dict(model.tasks)


FAULT_ENV = "MTDNN_FAULT_AT_STEP"

DIVERGED_EXIT_CODE = 3  # training stopped on a non-finite loss or gradient norm (2 is bad input)


TRACE_ENV = "MTDNN_TRACE_DIR"

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
    local ranks this process launched, and arms a watchdog; the ranks agree to stop in :func:`engineering_callbacks`
    with an all-reduce that runs at every optimizer step and every dev evaluation end whether or not a signal came,
    and only then is ``received_sigterm`` (what Lightning's loops check) set, on every rank at the same point.
    The watchdog ends the process with exit code 143 :func:`stop_grace_s` seconds after the signal or the agreement
    if it is still running; a signal arriving while the main thread waits inside a collective still arms it (a
    wake-up file descriptor read by a thread).
    """
    import threading

    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

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


def _patient_process_observer() -> None:
    """Make Lightning's launcher watch its local ranks patiently.

    Lightning's observer thread SIGKILLs the launching process (rank 0) within 5 s of any local rank exiting with a
    non-zero code, 143 included: after a SIGTERM agreed by every rank, rank 0 could be killed while it saves or
    reports. This one first gives rank 0 :func:`stop_grace_s` seconds to end by itself (after an agreed stop it
    exits 143; after a rank's death its next collective fails and it stops with one message), then does as
    Lightning's.
    """
    import time

    import lightning_fabric.strategies.launchers.subprocess_script as fabric_launcher
    import pytorch_lightning.strategies.launchers.subprocess_script as pl_launcher

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


def engineering_callbacks(last_checkpoint: Path, every_n_steps: int | None = None,
                          eval_every_n_steps: int | None = None) -> list:
    """Callbacks for faults and resumption (engineering, not research).

    - Every ``every_n_steps`` optimizer steps, save ``last_checkpoint`` at the end of the step (atomically). When
      the step ends with a dev evaluation (``eval_every_n_steps``), the checkpoint is saved again after it, so
      that a resumed run neither loses nor repeats that evaluation. With gradient accumulation a checkpoint is
      saved once per optimizer step, after the batch that completed it (never in the middle of an accumulation).
    - SIGTERM (a scheduler pre-empting the job) to any rank, some or all: at the end of every optimizer step and of
      every dev evaluation the ranks all-reduce whether one of them received it (a collective of every step, not
      one only on the signal's path); once they agree, every rank saves ``last_checkpoint`` (rank 0 writes it)
      and stops there. A signal in the middle of an accumulation stops at the end of that optimizer step; one
      during a dev evaluation, or in a step that ends with one, stops after the evaluation, which the checkpoint
      then holds. See :func:`graceful_stop_connector` for the watchdog.
    - Every rank writes its own RNG states to ``rng-rank<r>.pt`` beside ``last_checkpoint`` whenever it is saved
      (:func:`~mtdnn.training.rng.save_rank_rng`), so that a resumed DDP run draws the same dropout masks
      on every rank.
    - With ``$MTDNN_FAULT_AT_STEP=N``, send this process SIGTERM once N optimizer steps are done (after the step's
      dev evaluation, if it has one): tests of interruption and exact resume use a fixed step, never a timer.
    - With ``$MTDNN_TRACE_DIR``, every rank writes ``trace-rank<r>.jsonl``: per batch the task and the real
      example rows it trained on (for DDP tests).
    """
    import pytorch_lightning as pl
    import torch

    from .rng import save_rank_rng

    def stop_requested(trainer) -> bool:
        connector = trainer._signal_connector
        return bool(getattr(connector, "requested", False) or trainer.received_sigterm)

    def agree(trainer) -> bool:
        """Whether any rank asked to stop; every rank calls this at the same points of every run."""
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
        def __init__(self):
            self.saved_step, self.fault_pending = -1, False
            self.seen_step, self.stopping, self.stop_after_evaluation = None, False, False

        def on_train_start(self, trainer, pl_module):
            self.seen_step = trainer.global_step

        def stop(self, trainer) -> None:
            trainer.save_checkpoint(last_checkpoint)
            self.saved_step = trainer.global_step
            connector = trainer._signal_connector
            if hasattr(connector, "agreed"):
                connector.agreed()
            else:  # Lightning's own connector (not fit_and_export's trainer)
                connector.received_sigterm = True

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = trainer.global_step
            fault = os.environ.get(FAULT_ENV)
            if fault and step == int(fault) and not stop_requested(trainer) and not self.fault_pending:
                if eval_every_n_steps and step % eval_every_n_steps == 0:
                    self.fault_pending = True  # after this step's dev evaluation (on_validation_end)
                else:
                    os.kill(os.getpid(), signal.SIGTERM)
            new_step = step != self.seen_step
            self.seen_step = step
            if new_step and self.stop_after_evaluation:  # the evaluation did not come after all
                self.stop_after_evaluation = False
                self.stop(trainer)
                return
            if new_step and not self.stopping and agree(trainer):  # at optimizer step boundaries only
                self.stopping = True
                if validation_follows(trainer):
                    self.stop_after_evaluation = True  # the checkpoint then holds the evaluation
                else:
                    self.stop(trainer)
                    return
            if every_n_steps and new_step and step % every_n_steps == 0:
                trainer.save_checkpoint(last_checkpoint)
                self.saved_step = step

        def on_validation_end(self, trainer, pl_module):
            if trainer.sanity_checking:
                return
            if self.fault_pending:
                self.fault_pending = False
                os.kill(os.getpid(), signal.SIGTERM)
            if self.stop_after_evaluation or (not self.stopping and agree(trainer)):
                self.stopping, self.stop_after_evaluation = True, False
                self.stop(trainer)  # with this evaluation in it
            elif self.saved_step == trainer.global_step:
                trainer.save_checkpoint(last_checkpoint)  # with this evaluation in it
                self.saved_step = trainer.global_step

        def on_save_checkpoint(self, trainer, pl_module, checkpoint):  # full checkpoints only: last.ckpt
            save_rank_rng(last_checkpoint.parent, trainer.global_rank, trainer.world_size, checkpoint["global_step"])

    class TraceSteps(pl.Callback):
        def __init__(self, directory: Path):
            self.directory, self.rows = directory, []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            real = batch["idx"][batch["weight"] > 0].tolist()
            self.rows.append({"epoch": trainer.current_epoch, "step": trainer.global_step, "task": batch["task"],
                              "rows": real})

        def on_train_end(self, trainer, pl_module):
            append_lines(self.directory / f"trace-rank{trainer.global_rank}.jsonl",
                         [json.dumps(r) + "\n" for r in self.rows])

    callbacks: list = [SaveLastCheckpoint()]
    if os.environ.get(TRACE_ENV):
        callbacks.append(TraceSteps(Path(os.environ[TRACE_ENV])))
    return callbacks


RESUME_MAY_DIFFER = frozenset({
    "output_dir", "checkpoint_every_n_steps", "num_workers", "accelerator", "compile", "keep_last_checkpoint",
    "loggers",
    # where the data and task definitions lie may change; their content is compared (data_fingerprint, tasks)
    "data_dir", "task_defs",
})
"""Settings of ``config.yaml`` that do not change what is trained; every other one must match on ``resume``."""


def check_resumable(run_dir: Path, document: dict) -> Path:
    """The checkpoint to resume from, after checking that the run is incomplete and that its ``config.yaml``
    matches ``document`` (the one this run would write) in every setting that changes training.

    Every field is compared, the ``resolved`` section too (task definitions, encoder, the data's fingerprint),
    except :data:`RESUME_MAY_DIFFER`; all differences are named at once.

    Raises:
        CheckpointError: no such run, the run is complete, no last.ckpt, or the checkpoint or configuration is
            damaged or not a training run's.
        ConfigError: a setting or the data differs from the interrupted run's.
    """
    from .runs import CHECKPOINT_DIR, CONFIG_FILE, config_differences, load_checkpoint_file, read_metrics

    if read_metrics(run_dir) is not None:
        raise CheckpointError(f"{run_dir}: the run is complete; nothing to resume")
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    config_path = run_dir / CONFIG_FILE
    if not last.is_file() or not config_path.is_file():
        raise CheckpointError(f"{run_dir}: no interrupted run to resume (need {CONFIG_FILE} and {last.name})")
    load_checkpoint_file(last)  # a truncated or damaged checkpoint is reported here, before anything starts
    saved = read_yaml(config_path, CheckpointError, "run configuration")
    command = document[RESOLVED_KEY]["command"]
    if not isinstance(saved, dict) or not isinstance(saved.get(RESOLVED_KEY), dict) or \
            saved[RESOLVED_KEY].get("command") != command:
        raise CheckpointError(f"{config_path}: not the configuration of a '{command}' run written by this version "
                              "(a TrainConfig with a 'resolved' section)")
    differences = [d for d in config_differences(saved, document) if d[0] not in RESUME_MAY_DIFFER]
    if differences:
        shown = "; ".join(f"{_setting_name(key)}: now {now!r}, the interrupted run used {was!r}"
                          for key, was, now in differences[:8])
        more = f" (and {len(differences) - 8} more)" if len(differences) > 8 else ""
        raise ConfigError(f"--resume: {config_path}: the interrupted run was trained with other settings: "
                          f"{shown}{more}. Resume with the same settings and data, or start a new run")
    return last


def _setting_name(key: str) -> str:
    """``lr`` -> ``--lr``; keys of the ``resolved`` section as they are (``resolved.data_fingerprint.rte.train``)."""
    return key if "." in key else "--" + key.replace("_", "-")


def resolve_tasks(config: TrainConfig) -> dict[str, TaskDef]:
    """The tasks ``config`` trains: ``tasks``, or every task of ``task_defs`` with a train split.

    Raises:
        ConfigError: an unknown task, a task without a train split, or no dev split to select on.
    """
    all_tasks = load_task_defs(config.task_defs)
    names = config.tasks
    if names is None:  # every task that can be trained; the others are evaluation-only
        untrainable = [n for n, t in all_tasks.items() if "train" not in t.splits]
        if untrainable:
            log.info("%s: training every task with a train split; %s have none (evaluation only)",
                     config.task_defs, ", ".join(untrainable))
        names = [n for n in all_tasks if n not in untrainable] or list(all_tasks)
    tasks = select_tasks(all_tasks, names, config.task_defs)
    for name, task in tasks.items():
        if "train" not in task.splits:
            raise ConfigError(f"{config.task_defs}: task '{name}' has no train split; it can be evaluated, not trained")
    if not any("dev" in t.splits and t.task_type.selected for t in tasks.values()):
        raise ConfigError(f"{config.task_defs}: none of the tasks {', '.join(tasks)} has a dev split to select on "
                          "(mlm tasks are scored on dev but never select the best epoch)")
    return tasks


def resolve_config(config: TrainConfig) -> tuple[TrainConfig, dict[str, TaskDef]]:
    """``config`` with the trained tasks, the data root and the run directory filled in, and the tasks.

    Raises:
        ConfigError, DataError: see :func:`resolve_tasks` and :func:`mtdnn.tasks.data.resolve_data_dir`.
    """
    from ..tasks.data import resolve_data_dir

    tasks = resolve_tasks(config)
    data_dir = resolve_data_dir(config.data_dir)
    output_dir = config.output_dir or str(default_output_dir(config.task_defs, list(tasks), config.seed,
                                                              config.limit_train_examples,
                                                              config.limit_eval_examples))
    return config.updated(tasks=list(tasks), data_dir=str(data_dir), output_dir=output_dir), tasks


def check_loggers(config: TrainConfig) -> None:
    """Each logger asked for must be importable (CSV always is).

    Raises:
        ConfigError: naming the logger and the package to install.
    """
    packages = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
    for name in config.loggers or []:
        if name in packages:
            try:
                __import__(packages[name])
            except ImportError:
                raise ConfigError(f"--loggers {name}: the {packages[name]} package is not installed "
                                  f"(pip install {packages[name]}); loggers: {', '.join(LOGGERS)}") from None


def build_loggers(config: TrainConfig, run_dir: Path, resume_step: int | None = None) -> list:
    """Lightning loggers by name, all writing under ``run_dir/logs`` (W&B offline, MLflow to local files).

    ``config.loggers`` None: CSV, and TensorBoard when installed. ``resume_step`` (a resumed run's checkpoint
    step) makes the CSV log continue the first part's ``logs/metrics.csv``.
    """
    from .logs import ResumableCSVLogger

    names = config.loggers
    if names is None:
        names = ["csv"]
        try:
            import tensorboard  # noqa: F401

            names.append("tensorboard")
        except ImportError:
            pass
    loggers = []
    for name in names:
        if name == "csv":
            loggers.append(ResumableCSVLogger(run_dir, name="logs", resume_step=resume_step))
        elif name == "tensorboard":
            from pytorch_lightning.loggers import TensorBoardLogger

            loggers.append(TensorBoardLogger(run_dir, name="logs", version="tensorboard"))
        elif name == "wandb":
            from pytorch_lightning.loggers import WandbLogger

            make_dir(run_dir / "logs")
            loggers.append(WandbLogger(save_dir=str(run_dir / "logs"), offline=True, name=run_dir.name,
                                       log_model=False))
        elif name == "mlflow":
            from pytorch_lightning.loggers import MLFlowLogger

            loggers.append(MLFlowLogger(experiment_name="mtdnn", run_name=run_dir.name,
                                        tracking_uri=(run_dir / "logs" / "mlruns").resolve().as_uri()))
    return loggers


def fit(config: TrainConfig, *, overwrite: bool = False, resume: bool = False) -> Run:
    """Train, select on dev, export: one run of ``config`` (the code path of ``python -m mtdnn.train``).

    Everything that can be wrong is checked before the run directory is created; ``config.yaml`` is the
    resolved config (:func:`resolve_config`) with a ``resolved`` section (the encoder loaded, the task
    definitions).

    Args:
        overwrite: replace a run directory that holds a complete run.
        resume: continue the interrupted run in ``config.output_dir`` from ``checkpoints/last.ckpt``.

    Returns:
        The :class:`~mtdnn.training.runs.Run` (its ``metrics`` and ``best`` on rank 0).

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, data, encoder or run directory.
        Interrupted: Ctrl-C (exit code 130) or SIGTERM (143); ``last.ckpt`` is kept for ``resume``.
    """
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*predefined batch sampler.*")

    import pytorch_lightning as pl

    from ..modeling.model import load_tokenizer
    from ..tasks.data import check_files, check_max_length, split_fingerprint
    from .export import resolve_export
    from .datamodule import MultiTaskDataModule
    from .module import MultiTaskModule
    from .runs import CARVES_FILE, CONFIG_FILE, check_run_dir, lock_run_dir, prepare_run_dir
    from .speed import check_speed_flags, compile_encoder, set_sdpa_backend

    # 1. Validate everything that can be wrong before creating anything.
    check_bools("fit()", overwrite=overwrite, resume=resume)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")
    config, tasks = resolve_config(config)
    check_trainer_flags(config)
    check_loggers(config)
    check_speed_flags(buckets=config.length_buckets, compile_backend=config.compile, cuda_graphs=config.cuda_graphs,
                      accelerator=config.accelerator,
                      longest=config.max_length or max(t.max_length for t in tasks.values()),
                      pad_to_multiple_of=config.pad_to_multiple_of)
    run_dir = check_run_dir(config.output_dir, "--output-dir")
    data_dir = Path(config.data_dir)
    for task in tasks.values():
        check_files(task, [s for s in ("train", "dev") if s in task.splits], data_dir)

    encoder = config.encoder
    init_export = None
    if config.init_from:
        init_export = resolve_export(config.init_from)
        encoder = str(init_export / "encoder")
        if config.encoder != "packaged-minilm":
            log.warning("--encoder %s is ignored: --init-from %s gives the encoder", config.encoder, config.init_from)
    tokenizer = load_tokenizer(encoder, config.trust_remote_code)
    for task in tasks.values():
        check_max_length(task, tokenizer, config.max_length,
                         "--max-length" if config.max_length else f"{config.task_defs}: task '{task.name}': max_length")
    pl.seed_everything(config.seed, workers=True, verbose=False)
    try:
        module = MultiTaskModule(encoder, {n: t.to_plain() for n, t in tasks.items()}, lr=config.lr,
                                 weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio,
                                 dropout=config.dropout, trust_remote_code=config.trust_remote_code)
    except ConfigError as err:  # a task's head does not fit the encoder: name the task-definition file
        raise ConfigError(f"{config.task_defs}: {err}" if str(err).startswith("task '") else str(err)) from None
    tasks = log_pooling(tasks, module.model)
    limit = getattr(module.model.encoder.config, "max_position_embeddings", None)
    longest = config.max_length or max(t.max_length for t in tasks.values())
    if limit and limit > 0 and longest > limit:  # XLNet: -1 (relative positions, no limit)
        raise ConfigError(f"max length {longest} (--max-length or a task's max_length) exceeds the encoder's "
                          f"{limit} positions")
    padded = math.ceil(longest / config.pad_to_multiple_of) * config.pad_to_multiple_of
    if limit and limit > 0 and padded > limit:
        raise ConfigError(f"--pad-to-multiple-of {config.pad_to_multiple_of}: pads rows of up to {longest} tokens to "
                          f"{padded}, beyond the encoder's {limit} positions; choose a multiple of at most {limit}")
    if init_export is not None:
        copied = copy_matching_heads(module.model, init_export, tasks)
        log.info("initialised from %s: encoder and heads of %s", init_export, ", ".join(copied) or "no task")
    datamodule = datamodule_for(config, tasks, tokenizer, MultiTaskDataModule)
    source_encoder = config.encoder
    if init_export is not None:
        meta = read_json(init_export / "mtdnn_export.json", CheckpointError, "export metadata")
        source_encoder = meta.get("source_encoder", encoder) if isinstance(meta, dict) else encoder
    resolved = {"command": "train", "encoder": encoder, "source_encoder": source_encoder,
                "tasks": {n: t.to_plain() for n, t in tasks.items()},
                "data_fingerprint": {n: {s: split_fingerprint(t, s, data_dir) for s in ("train", "dev")
                                         if s in t.splits} for n, t in tasks.items()}}
    document = {**config.to_yaml_dict(), RESOLVED_KEY: resolved}
    resume_from = check_resumable(run_dir, document) if resume else None
    lock = None
    if config_is_global_zero(config):
        datamodule.prepare_data()  # parse and tokenize now, so data errors come before the run directory
        check_eval_interval(config, datamodule)
        # one writer per run directory: a second training started on it is refused here, having written nothing
        lock = lock_run_dir(run_dir, "--output-dir")
    try:
        if lock is not None:
            if resume_from is None:
                prepare_run_dir(run_dir, overwrite)
                from ..tasks.token import article_lists

                carves = article_lists(tasks, data_dir)
                if carves:  # the articles of each side of a carve by article (SQuAD), for the record
                    write_json_atomic(run_dir / CARVES_FILE, carves)
            # on resume, only settings that do not change training may differ (the data's location): recorded anew
            write_yaml_atomic(run_dir / CONFIG_FILE, document)
        set_sdpa_backend(config.sdpa_backend)
        if config.compile:
            # Module.compile works in place: no OptimizedModule wrapper, so no "_orig_mod." in checkpoint keys.
            compile_encoder(module.model.encoder, config.compile, config.length_buckets, config.cuda_graphs)
            datamodule.mark_shapes = "buckets" if config.length_buckets else "dynamic"

        # 2. Train, export the best model, write schedule.json and (last) metrics.json.
        fit_and_export(module, datamodule, tasks, tokenizer, run_dir, config, source_encoder=source_encoder,
                       resume_from=resume_from)
    finally:
        if lock is not None:
            lock.release()
    return Run(run_dir)


def datamodule_for(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer, cls, **extra):
    """The data module of ``config`` (``cls``: :class:`~mtdnn.training.datamodule.MultiTaskDataModule` or a
    subclass; ``extra``: its own arguments)."""
    return cls(tasks, Path(config.data_dir), tokenizer, batch_size=config.batch_size,
               eval_batch_size=config.eval_batch_size, schedule=config.schedule,
               temperature=config.temperature if config.schedule == "temperature" else 1.0,
               seed=config.seed if config.data_seed is None else config.data_seed,
               limit_train_examples=config.limit_train_examples, max_length=config.max_length,
               pad_to_multiple_of=config.pad_to_multiple_of, num_workers=config.num_workers,
               limit_eval_examples=config.limit_eval_examples, accumulate_grad_batches=config.accumulate_grad_batches,
               length_buckets=config.length_buckets, group_by_length=config.group_by_length, **extra)


def check_eval_interval(config: TrainConfig, datamodule) -> None:
    """Refuse an ``eval_every_n_steps`` longer than the run (no dev evaluation would select a model).

    Call after ``datamodule.prepare_data()``: the schedule's length needs the training splits.

    Raises:
        ConfigError: naming the interval and the run's number of optimizer steps.
    """
    if not config.eval_every_n_steps:
        return
    datamodule.setup("fit")
    steps = planned_steps(config, len(datamodule.train_sampler))
    if config.eval_every_n_steps > steps:
        raise ConfigError(f"--eval-every-n-steps {config.eval_every_n_steps}: the run has only {steps} optimizer "
                          "steps, so no dev evaluation would select a model")


def planned_steps(config: TrainConfig, batches_per_epoch: int) -> int:
    """Optimizer steps of the whole run: ``ceil(batches / accumulation)`` per epoch (Lightning steps on an
    epoch's last batch), capped by ``max_steps``."""
    total = config.max_epochs * math.ceil(batches_per_epoch / config.accumulate_grad_batches)
    return min(total, config.max_steps) if config.max_steps else total


def evaluate_at_max_steps():
    """A callback that makes the optimizer step where ``--max-steps`` stops the run end with a dev evaluation, as
    an epoch end does (Lightning evaluates only at epoch ends or every ``val_check_interval`` batches, so a run
    stopped between them would have nothing to select on).

    It sets ``trainer.should_stop`` after that step's last batch; Lightning then validates before stopping
    (``_TrainingEpochLoop._should_check_val_fx``: "allow validation if requesting to stop"). Every rank computes the
    same condition from the step count, so no collective is needed.
    """
    import pytorch_lightning as pl

    class EvaluateAtMaxSteps(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
                trainer.should_stop = True

    return EvaluateAtMaxSteps()


def fit_and_export(module, datamodule, tasks: dict[str, TaskDef], tokenizer, run_dir: Path, config: TrainConfig, *,
                   source_encoder: str, resume_from: Path | None = None) -> dict | None:
    """The toolkit's Trainer set-up, shared by every training command (train, distill's student, ...).

    Trains ``module`` on ``datamodule`` with the engineering settings of ``config`` (Lightning flags,
    accumulation, max steps, dev evaluation every N steps, early stopping, loggers); keeps ``best.ckpt`` (dev
    average, first of equal scores) and ``last.ckpt`` (every epoch, every N steps, on SIGTERM); asserts that
    exactly the planned number of optimizer steps ran (unless stopped early); then on rank 0 exports the best
    model and writes ``schedule.json`` and, last, ``metrics.json``.

    Returns:
        The metrics summary; None on ranks other than 0.

    Under DDP a SIGTERM to any rank stops every rank at the same step boundary (see :func:`engineering_callbacks`
    and :func:`graceful_stop_connector`).

    Raises:
        Interrupted: Ctrl-C (130) or SIGTERM (143), after ``last.ckpt`` is saved where possible.
        RankLost: another rank of a distributed run died (exit code 1).
        ConfigError: resuming with another world size than the checkpoint's (:func:`check_world_size`).
    """
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    from .export import export_model
    from .rng import RANK_RNG_FILE
    from .module import TrainingDiverged
    from .logs import summary_callback
    from .runs import AtomicCheckpointIO, CHECKPOINT_DIR, EXPORT_DIR, METRICS_FILE, SCHEDULE_FILE, check_finite_run, \
        load_checkpoint_file

    # best.ckpt by the dev average (saved after each dev evaluation); last.ckpt at every epoch end, listed after
    # it so that it holds the updated best-score state.
    checkpoint = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="best", monitor="dev/average",
                                 mode="max", save_top_k=1, auto_insert_metric_name=False, enable_version_counter=False,
                                 save_weights_only=True)  # weights (and hyper-parameters) only: a third of the size
    last = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="last", monitor=None, save_top_k=1,
                           every_n_epochs=1, save_on_train_epoch_end=True, auto_insert_metric_name=False,
                           enable_version_counter=False)
    callbacks = [checkpoint, last, *engineering_callbacks(run_dir / CHECKPOINT_DIR / "last.ckpt",
                                                          config.checkpoint_every_n_steps, config.eval_every_n_steps),
                 summary_callback(), evaluate_at_max_steps()]
    early_stopping = None
    if config.early_stopping_patience:
        early_stopping = EarlyStopping(monitor="dev/average", mode="max", patience=config.early_stopping_patience,
                                       check_on_train_epoch_end=False)
        callbacks.append(early_stopping)
    # One continuous log: a resumed run continues logs/metrics.csv (rows after its checkpoint are logged again)
    # and writes its TensorBoard events beside the first part's, so TensorBoard shows one run.
    resume_step = load_checkpoint_file(resume_from)["global_step"] if resume_from else None
    evaluation = {}
    if config.eval_every_n_steps:  # Lightning counts batches; across epochs, not at epoch ends
        evaluation = {"val_check_interval": config.eval_every_n_steps * config.accumulate_grad_batches,
                      "check_val_every_n_epoch": None}
    trainer = pl.Trainer(max_epochs=config.max_epochs, max_steps=config.max_steps or -1,
                         accumulate_grad_batches=config.accumulate_grad_batches, accelerator=config.accelerator,
                         devices=config.devices, num_nodes=config.num_nodes,
                         strategy=trainer_strategy(config.strategy), precision=config.precision,
                         gradient_clip_val=config.gradient_clip or None, deterministic=config.deterministic,
                         use_distributed_sampler=False, callbacks=callbacks,
                         logger=build_loggers(config, run_dir, resume_step), plugins=[AtomicCheckpointIO()],
                         default_root_dir=run_dir, log_every_n_steps=10, **evaluation)
    if resume_from is not None:
        check_world_size(resume_from, trainer.world_size)
    last_path = run_dir / CHECKPOINT_DIR / "last.ckpt"
    # SIGTERM: the ranks agree to stop at a step boundary (engineering_callbacks), never in the signal handler
    stopper = trainer._signal_connector = graceful_stop_connector(trainer, last_path)
    _patient_process_observer()
    sigint = signal.getsignal(signal.SIGINT)
    try:
        # the checkpoint holds tensors and plain values only (RNG states included): no pickled objects on resume
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
    except SystemExit:  # Lightning exits after a graceful shutdown on Ctrl-C or SIGTERM
        if not trainer.interrupted:
            raise
    except TrainingDiverged as err:
        kept = (f"the last checkpoint before it is kept: {last_path}" if last_path.is_file()
                else "no checkpoint had been saved before it")
        raise Diverged(f"{err}; {kept}; no metrics.json written", DIVERGED_EXIT_CODE) from None
    except Exception as err:
        if trainer.world_size <= 1 or not is_peer_failure(err):
            raise
        kept = f"resume with --resume (from {last_path})" if last_path.is_file() else "no checkpoint was saved yet"
        if stopper.requested or stopper.received_sigterm:  # stopping on SIGTERM when a peer went first
            raise Interrupted(f"rank {trainer.global_rank}: SIGTERM: another rank ended first; {kept}; no "
                              "metrics.json written",
                              SIGTERM_EXIT_CODE) from None
        first_line = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise RankLost(f"rank {trainer.global_rank}: another rank of this {trainer.world_size}-process run died "
                       f"(its collective failed here: {first_line}); this rank stops too; {kept}; no metrics.json "
                       "written", RANK_LOST_EXIT_CODE) from None
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt
        if trainer.world_size <= 1:  # no peer to wait for; the caller's process goes on (the API, tests)
            stopper.cancel_watchdog()
    if trainer.interrupted:
        hint = (f"resume with --resume (from {last_path})" if last_path.is_file()
                else "no checkpoint was saved yet (they are saved at epoch ends, every --checkpoint-every-n-steps "
                     "and on SIGTERM)")
        sigterm = stopper.requested or trainer.received_sigterm
        rank = f"rank {trainer.global_rank}: " if trainer.world_size > 1 else ""
        raise Interrupted(f"{rank}{'SIGTERM' if sigterm else 'Ctrl-C'}: {hint}; no metrics.json written",
                          SIGTERM_EXIT_CODE if sigterm else 130)
    stopped = early_stopping is not None and early_stopping.wait_count >= early_stopping.patience
    expected_steps = planned_steps(config, len(datamodule.train_sampler))
    if not stopped and trainer.global_step != expected_steps:
        raise RuntimeError(f"training ended after {trainer.global_step} optimizer steps, expected {expected_steps}")
    if not trainer.is_global_zero:
        return None

    if not checkpoint.best_model_path:  # every evaluation's dev average was NaN or inf (max steps evaluate too)
        raise Diverged(f"{run_dir}: training diverged: no evaluation had a finite dev average, so there is no best "
                       "checkpoint; the run is not complete (no metrics.json). Lower --lr or --weight-decay, keep "
                       "--gradient-clip on, and start again", DIVERGED_EXIT_CODE)
    best_path = Path(checkpoint.best_model_path)
    best_state = load_checkpoint_file(best_path)["state_dict"]
    check_finite_run(best_state, module.dev_history, best_path)  # a diverged run is never written as complete
    module.load_state_dict(best_state)
    module.model.cpu().float()
    export_model(module.model, tokenizer, tasks, run_dir / EXPORT_DIR, source_encoder=source_encoder)
    write_json_atomic(run_dir / SCHEDULE_FILE, schedule_summary(module.step_log, config.schedule, config.batch_size,
                                                                config.accumulate_grad_batches))
    stop = {"step": trainer.global_step, "epoch": trainer.current_epoch + 1,
            "patience": early_stopping.patience} if stopped else None
    summary = metrics_summary(module.dev_history, best_path, run_dir, stop)
    write_json_atomic(run_dir / METRICS_FILE, summary)
    if not config.keep_last_checkpoint:  # the run is complete: nothing to resume
        (run_dir / CHECKPOINT_DIR / "last.ckpt").unlink(missing_ok=True)
        for rng_file in (run_dir / CHECKPOINT_DIR).glob(RANK_RNG_FILE.format(rank="*")):
            rng_file.unlink(missing_ok=True)
    return summary


def check_world_size(checkpoint: Path, world_size: int) -> None:
    """Refuse to resume ``checkpoint`` with another number of processes than the run that saved it (each rank's
    data shard and random state belong to one world size). Checkpoints saved before the world size was recorded
    pass.

    Raises:
        ConfigError: naming the saved and the requested world size.
    """
    from .runs import load_checkpoint_file

    saved = load_checkpoint_file(checkpoint).get("mtdnn", {}).get("world_size")
    if saved is not None and int(saved) != int(world_size):
        raise ConfigError(f"--resume: {checkpoint} was saved by a run of {saved} process(es) (world size {saved}), "
                          f"and this run would have {world_size} (world size {world_size}, from --devices and "
                          f"--num-nodes); resume with the same --devices and --num-nodes, or start a new run")


PEER_FAILURE_MARKERS = ("connection closed by peer", "connection reset by peer", "broken pipe", "gloo", "nccl",
                        "socket closed", "connection refused", "timed out")


def is_peer_failure(err: BaseException) -> bool:
    """Whether ``err`` is a collective failing because another rank went away (torch.distributed's errors, or the
    communication library's RuntimeError naming the lost connection)."""
    import torch

    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(m in text for m in PEER_FAILURE_MARKERS)
