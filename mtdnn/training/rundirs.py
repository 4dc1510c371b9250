"""Run directories without torch: their layout, recognising one of this toolkit's, and the checks a training
command makes on its ``--output-dir`` before anything heavy is imported (:mod:`mtdnn.training.runs` re-exports
these beside the checkpoint I/O).

A run is complete exactly when ``metrics.json`` exists with ``"status": "complete"``.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError, UserError
from ..fileio import OUTPUT_RECORD, check_output_dir, read_json, read_yaml
from .config import TrainConfig

METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
SCHEDULE_FILE = "schedule.json"
EXPORT_DIR = "export"
CHECKPOINT_DIR = "checkpoints"
LOGS_DIR = "logs"
CARVES_FILE = "carves.json"

RUN_ENTRIES = frozenset({CONFIG_FILE, CHECKPOINT_DIR, LOGS_DIR, SCHEDULE_FILE, EXPORT_DIR, METRICS_FILE, CARVES_FILE,
                         OUTPUT_RECORD})
"""What a training run writes at the top of its directory; replacing a run removes these and nothing else (a
student adds its own: :func:`prepare_run_dir`'s ``entries``)."""

DIVERGED_EXIT_CODE = 3
"""Exit code of a run that diverged (a non-finite loss, gradient norm, weight or dev score); 2 is bad input."""

RUN_COMMANDS = frozenset({"train", "distill"})
"""The ``resolved.command`` of a run directory's ``config.yaml`` written by this toolkit."""


def is_run_dir(directory: str | Path) -> bool:
    """Whether ``directory`` is a training run directory of this toolkit: its ``config.yaml`` has this toolkit's
    ``resolved.command`` (also a run written before run directories had a record file, or an interrupted one)."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        return False
    try:
        settings, resolved = read_run_config(directory)
    except UserError:
        return False
    # a whole TrainConfig and this toolkit's command: a two-line file naming the command is not a run
    if resolved.get("command") not in RUN_COMMANDS or not isinstance(resolved.get("tasks"), dict):
        return False
    return set(TrainConfig.model_fields) <= set(settings)


def check_run_dir(run_dir: str | Path, flag: str = "--output-dir") -> Path:
    """Before any work: ``run_dir`` is new, empty, or a run directory of this toolkit (:func:`is_run_dir`).

    Raises:
        UserError: the directory holds other files (:func:`mtdnn.fileio.check_output_dir`), naming it.
    """
    return check_output_dir(run_dir, flag, "run", recognised=is_run_dir)


def read_metrics(run_dir: str | Path) -> dict | None:
    """The run's ``metrics.json`` if the run is complete, else None."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return None
    try:
        metrics = read_json(path, CheckpointError, "run metrics")
    except CheckpointError:  # a damaged metrics.json: the run is not complete
        return None
    complete = isinstance(metrics, dict) and metrics.get("status") == "complete" and isinstance(metrics.get("best"), dict)
    return metrics if complete else None


def read_run_config(run_dir: str | Path) -> tuple[dict, dict]:
    """A run's ``config.yaml`` as ``(settings, resolved)``: the :class:`~mtdnn.training.config.TrainConfig` fields
    and the ``resolved`` section (``command``, ``encoder``, ``tasks``, ...).

    Runs written before ``config.yaml`` held the TrainConfig (flags under ``args``, the encoder and data root at the
    top) are read into the same two parts.

    Raises:
        CheckpointError: missing, unreadable or not a mapping.
    """

    path = Path(run_dir) / CONFIG_FILE
    raw = read_yaml(path, CheckpointError, "run configuration")
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: not a run configuration (expected a mapping)")
    if "args" in raw or "resolved" not in raw:  # the earlier layout
        settings = dict(raw.get("args") or {})
        settings["data_dir"] = raw.get("data_dir", settings.get("data_dir"))
        resolved = {k: raw.get(k) for k in ("command", "encoder", "tasks")}
        return settings, resolved
    settings = {k: v for k, v in raw.items() if k != "resolved"}
    return settings, dict(raw["resolved"] or {})


def check_unfinished(run_dir: Path, overwrite: bool, resume: bool, flag: str = "--output-dir") -> None:
    """One rule for every training command: an unfinished run directory (a run's ``config.yaml``, no complete
    ``metrics.json``) is continued with ``resume``, replaced with ``overwrite``, and otherwise refused; it is never
    emptied behind the user's back.

    Raises:
        CheckpointError: (exit code 2) the directory holds an interrupted run and neither flag is given.
    """

    if resume or overwrite or not is_run_dir(run_dir) or read_metrics(run_dir) is not None:
        return
    raise CheckpointError(f"{flag} {run_dir}: holds an interrupted run (config.yaml, no metrics.json); pass --resume "
                          "to continue it (resume=True), --overwrite to replace it (overwrite=True), or choose "
                          "another directory")
