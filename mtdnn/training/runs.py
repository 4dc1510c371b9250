"""Run directories: their layout, atomic writes, and telling a complete run from an interrupted one.

A training run directory holds::

    config.yaml        the TrainConfig, resolved, and a resolved: section (encoder, task definitions), written first
    checkpoints/       last.ckpt and best.ckpt (Lightning checkpoints, saved atomically)
    logs/              metrics.csv per step/epoch (and TensorBoard events when installed)
    schedule.json      the task of every optimizer step and the realised batch count per task
    export/            the best model: Hugging Face encoder + tokenizer, heads, task definitions
    metrics.json       dev scores per epoch and the best epoch; written last, atomically, only on success

A run is complete exactly when ``metrics.json`` exists with ``"status": "complete"``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from ..errors import CheckpointError, Diverged, UserError
from ..fileio import (  # noqa: F401
    OUTPUT_RECORD,
    DirectoryLock,
    check_output_dir,
    claim_output_dir,
    default_mode,
    make_dir,
    prepare_output_dir,
    read_checkpoint,
    read_json,
    read_yaml,
    remove_stale_temporaries,
    write_atomic,
    write_json_atomic,
)
from .config import load_config
from .rundirs import (  # noqa: F401 - the run-directory layout and checks, re-exported for callers
    CARVES_FILE,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DIVERGED_EXIT_CODE,
    EXPORT_DIR,
    LOGS_DIR,
    METRICS_FILE,
    RUN_COMMANDS,
    RUN_ENTRIES,
    SCHEDULE_FILE,
    check_run_dir,
    is_run_dir,
    read_metrics,
    read_run_config,
)


def lock_run_dir(run_dir: str | Path, flag: str = "--output-dir") -> DirectoryLock:
    """Take ``run_dir``'s lock (global rank zero only) and remove what a killed run left there: temporaries of
    atomic writes (``metrics.json.<pid>.<random>.tmp``, ``.export.<pid>.<random>``, checkpoints' partial files).

    Raises:
        UserError: another process is writing in ``run_dir`` (naming its pid).
    """
    lock = DirectoryLock(run_dir, flag)
    remove_stale_temporaries(run_dir, RUN_ENTRIES | {"report.json", "report.md"}, locked=True)
    remove_stale_temporaries(Path(run_dir) / CHECKPOINT_DIR,
                             lambda name: name in ("last.ckpt", "best.ckpt") or re.fullmatch(r"rng-rank\d+\.pt", name),
                             locked=True)
    return lock


def prepare_run_dir(run_dir: str | Path, overwrite: bool, resume: bool = False,
                    entries: frozenset[str] = RUN_ENTRIES) -> Path:
    """Create ``run_dir`` for a new run (the caller holds its lock, :func:`lock_run_dir`).

    A directory holding a complete run is refused unless ``overwrite``; with ``overwrite`` (or when it holds an
    interrupted run and ``resume`` is false) what a run writes there (``entries``) is removed first, and nothing
    else: a directory that is not a run of this toolkit is refused before (:func:`check_run_dir`).

    Raises:
        CheckpointError: the directory holds a complete run and ``overwrite`` is false.
        UserError: the directory holds files that are not a run's.
    """
    run_dir = Path(run_dir)
    if read_metrics(run_dir) is not None and not overwrite:
        raise CheckpointError(f"{run_dir}: holds a complete run (metrics.json); pass --overwrite (mtdnn.fit: "
                              "overwrite=True) to replace it, or choose another --output-dir (output_dir)")
    check_run_dir(run_dir)
    if run_dir.exists() and (overwrite or not resume):
        try:
            for child in run_dir.iterdir():
                if child.name in entries:
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        except OSError as err:
            raise UserError(f"{run_dir}: cannot empty the run directory ({err.strerror}: {err.filename})") from None
    return claim_output_dir(run_dir, "run")


def continue_unfinished(run_dir: str | Path) -> dict[str, bool]:
    """``fit``'s ``resume``/``overwrite`` for a driver that owns ``run_dir`` (a comparison's arm, a partial-input
    variant) and reruns it: an interrupted run with ``last.ckpt`` is resumed, one that saved nothing is started
    again, a new directory is simply made."""
    interrupted = is_run_dir(run_dir) and read_metrics(run_dir) is None
    resume = interrupted and (Path(run_dir) / CHECKPOINT_DIR / "last.ckpt").is_file()
    return {"resume": resume, "overwrite": interrupted and not resume}


def complete_run(run_dir: str | Path) -> dict:
    """The metrics of a complete run.

    Raises:
        CheckpointError: the directory does not exist or holds no complete run.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir}: run directory does not exist")
    metrics = read_metrics(run_dir)
    if metrics is None:
        raise CheckpointError(f"{run_dir}: not a complete run (no metrics.json with status complete; "
                              "the run was interrupted or failed)")
    return metrics


def check_finite_run(state_dict: dict, history: list[dict], source: str | Path) -> None:
    """The last guard before a run is written as complete: its best weights and every dev score are finite.

    Training stops earlier on a non-finite loss or gradient norm (the device-side flag of the training step); this
    check makes sure no path writes a diverged run's ``metrics.json`` with ``status: complete``.

    Raises:
        Diverged: exit code 3, naming ``source`` and how many tensors or scores are non-finite.
    """
    bad = [k for k, v in state_dict.items()
           if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise Diverged(f"{source}: training diverged: {len(bad)} of {len(state_dict)} weight tensors hold NaN or inf "
                       f"(e.g. {bad[0]}); the run is not complete (no metrics.json). Lower --lr or --weight-decay, "
                       "keep --gradient-clip on, and start again", DIVERGED_EXIT_CODE)
    scores = [(h.get("epoch"), h.get("average")) for h in history]
    bad_scores = [e for e, a in scores if not isinstance(a, (int, float)) or not math.isfinite(a)]
    if bad_scores:
        raise Diverged(f"{source}: training diverged: the dev average of epoch(s) {bad_scores} is not a finite number; "
                       "the run is not complete (no metrics.json). Lower --lr or --weight-decay, keep --gradient-clip "
                       "on, and start again", DIVERGED_EXIT_CODE)


def config_differences(saved: Any, current: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Every field where two configurations differ, as ``(dotted key, saved value, current value)``.

    Mappings are compared key by key (a key missing on one side differs, as None); other values by equality.
    """
    if isinstance(saved, dict) and isinstance(current, dict):
        found = []
        for key in list(saved) + [k for k in current if k not in saved]:
            found += config_differences(saved.get(key), current.get(key), f"{prefix}{key}.")
        return found
    return [] if saved == current else [(prefix.rstrip("."), saved, current)]


@dataclass(frozen=True)
class Run:
    """A training run directory (what :func:`mtdnn.fit` returns): its paths, metrics and best model.

    ``metrics``, ``best`` and ``config`` read the files each time they are asked for.
    """

    directory: Path

    def __post_init__(self):
        object.__setattr__(self, "directory", Path(self.directory))

    @property
    def config_path(self) -> Path:
        return self.directory / CONFIG_FILE

    @property
    def checkpoints(self) -> Path:
        return self.directory / CHECKPOINT_DIR

    @property
    def export(self) -> Path:
        return self.directory / EXPORT_DIR

    @property
    def metrics_path(self) -> Path:
        return self.directory / METRICS_FILE

    @property
    def schedule_path(self) -> Path:
        return self.directory / SCHEDULE_FILE

    @property
    def complete(self) -> bool:
        return read_metrics(self.directory) is not None

    @property
    def metrics(self) -> dict:
        """``metrics.json``: dev scores per evaluation and the best one.

        Raises:
            CheckpointError: the run is not complete.
        """
        return complete_run(self.directory)

    @property
    def best(self) -> dict:
        """The best evaluation: ``{"epoch", "step", "checkpoint", "tasks": {task: {metric: value}}, "average"}``."""
        return self.metrics["best"]

    @property
    def config(self):
        """The run's :class:`~mtdnn.training.config.TrainConfig` (from ``config.yaml``).

        Raises:
            ConfigError: ``config.yaml`` is missing, or is not a training run's.
        """

        return load_config(self.config_path)


def load_checkpoint_file(path: str | Path) -> dict:
    """``torch.load(path, weights_only=True)`` on CPU (:func:`mtdnn.fileio.read_checkpoint`).

    Raises:
        CheckpointError: missing, truncated or not a checkpoint (a damaged file names itself as such).
    """
    return read_checkpoint(path)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes to a temporary file and renames it into place.

    An interruption while saving leaves the previous checkpoint intact, never a half-written file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        path = Path(path)
        make_dir(path.parent)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.partial.tmp")  # removed by lock_run_dir after a kill
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:  # disk full, permissions: the previous checkpoint stays
            tmp.unlink(missing_ok=True)
            raise UserError(f"{path}: cannot save the checkpoint ({err.strerror}); the previous one is kept") from None
