"""What the training pipeline passes between its steps: a path's :class:`Outputs`, the checked :class:`Plan`,
the :class:`Result` of executing it (see :mod:`mtdnn.training.pipeline`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..tasks.taskdef import TaskDef
from .config import TrainConfig
from .runs import RUN_ENTRIES


@dataclass(frozen=True)
class Outputs:
    """What :func:`execute` writes for a path.

    Attributes:
        run_dir: a run directory (lock, ``config.yaml``, checkpoints, logs, SIGTERM-safe stopping, resume); False
            for transfer's fine-tunes, which keep their own ``per_run/`` records.
        export: the export of the best model (``export/``).
        schedule: ``schedule.json``.
        metrics: ``metrics.json`` (what makes a run complete).
        progress: Lightning's progress bar and model summary.
    """

    run_dir: bool = True
    export: bool = True
    schedule: bool = True
    metrics: bool = True
    progress: bool = True


TRAINING_RUN = Outputs()
FINE_TUNE_ONLY = Outputs(run_dir=False, export=False, schedule=False, metrics=False, progress=False)


@dataclass
class Plan:
    """A checked training run, nothing created yet (see :func:`plan`).

    Attributes:
        config: the resolved :class:`TrainConfig` (tasks, data root and run directory filled in).
        tasks: the task definitions trained, pooling resolved for the encoder.
        document: the ``config.yaml`` to write (``config`` plus its ``resolved`` section); None without a run dir.
        resume_from: ``last.ckpt`` to continue from (``resume``), else None.
        prepare: called with the plan once its run directory is taken for a new run (not on resume), to write what
            a path keeps beside ``config.yaml`` (the student's truncated encoder, SQuAD's carve lists).
        report: called on rank 0 with ``metrics.json``'s summary and the run directory, after it is written.
        root_dir: Lightning's ``default_root_dir`` without a run directory.
    """

    config: TrainConfig
    tasks: dict[str, TaskDef]
    tokenizer: Any
    module: Any
    datamodule: Any
    source_encoder: str
    document: dict | None = None
    run_dir: Path | None = None
    overwrite: bool = False
    resume_from: Path | None = None
    outputs: Outputs = TRAINING_RUN
    entries: frozenset[str] = RUN_ENTRIES
    prepare: Callable[["Plan"], None] | None = None
    report: Callable[[dict, Path], Any] | None = None
    root_dir: Path | None = None


@dataclass
class Result:
    """What :func:`execute` returns: the metrics summary (rank 0 of a run with ``metrics``; else None), the fitted
    module and its Trainer."""

    summary: dict | None
    module: Any
    trainer: Any
