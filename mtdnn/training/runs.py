"""Run directories: their layout, atomic writes, and telling a complete run from an interrupted one.

A training run directory holds::

    config.yaml        the resolved configuration (flags and task definitions), written first
    checkpoints/       last.ckpt and best.ckpt (Lightning checkpoints, saved atomically)
    logs/              metrics.csv per step/epoch (and TensorBoard events when installed)
    schedule.json      the task of every optimizer step and the realised batch count per task
    export/            the best model: Hugging Face encoder + tokenizer, heads, task definitions
    metrics.json       dev scores per epoch and the best epoch; written last, atomically, only on success

A run is complete exactly when ``metrics.json`` exists with ``"status": "complete"``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from ..errors import CheckpointError
from ..fileio import default_mode, write_atomic, write_json_atomic  # noqa: F401 (re-exported)

METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
SCHEDULE_FILE = "schedule.json"
EXPORT_DIR = "export"
CHECKPOINT_DIR = "checkpoints"


def read_metrics(run_dir: str | Path) -> dict | None:
    """The run's ``metrics.json`` if the run is complete, else None."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return None
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, OSError):
        return None
    complete = isinstance(metrics, dict) and metrics.get("status") == "complete" and isinstance(metrics.get("best"), dict)
    return metrics if complete else None


def prepare_run_dir(run_dir: str | Path, overwrite: bool, resume: bool = False) -> Path:
    """Create ``run_dir`` for a new run.

    A directory holding a complete run is refused unless ``overwrite``; with ``overwrite`` (or when it holds an
    interrupted run and ``resume`` is false) its contents are removed first.

    Raises:
        CheckpointError: the directory holds a complete run and ``overwrite`` is false.
    """
    run_dir = Path(run_dir)
    if read_metrics(run_dir) is not None and not overwrite:
        raise CheckpointError(f"{run_dir}: holds a complete run (metrics.json); pass --overwrite to replace it "
                              "or choose another --output-dir")
    if run_dir.exists() and (overwrite or not resume):
        if not run_dir.is_dir():
            raise CheckpointError(f"{run_dir}: exists and is not a directory")
        for child in run_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


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


def load_checkpoint_file(path: str | Path) -> dict:
    """``torch.load(path, weights_only=True)`` on CPU.

    Raises:
        CheckpointError: missing, truncated or not a checkpoint (a damaged file names itself as such).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # zip and unpickling errors have many types
        raise CheckpointError(f"{path}: cannot read the checkpoint, it is truncated or damaged ({err})") from None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes to a temporary file and renames it into place.

    An interruption while saving leaves the previous checkpoint intact, never a half-written file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
