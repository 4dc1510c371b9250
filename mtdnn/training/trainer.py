"""Multi-task training of one shared encoder (MT-DNN Algorithm 1): :func:`fit` runs a :class:`TrainConfig`.

Example (the command, :mod:`mtdnn.cli.train`, and the API, :func:`mtdnn.fit`, both end here)::

    python -m mtdnn.train task_defs/glue.yaml --data-dir ../shared/data --tasks rte,mrpc,stsb,cola

writes a run directory (see :mod:`mtdnn.training.runs`) with the resolved config, checkpoints, logs, ``schedule.json``,
the export of the best model and, last, ``metrics.json``. The run is planned and executed by
:mod:`mtdnn.training.pipeline` (what it trains is resolved by :mod:`mtdnn.training.resolve`).
"""

from __future__ import annotations

from pathlib import Path

from ..fileio import write_json_atomic
from ..tasks.data import article_lists
from . import pipeline
from .config import TrainConfig
from .runs import CARVES_FILE, Run


def fit(config: TrainConfig, *, overwrite: bool = False, resume: bool = False) -> Run:
    """Train, select on dev, export: one run of ``config`` (the code path of ``python -m mtdnn.train``).

    Everything that can be wrong is checked before the run directory is created
    (:func:`mtdnn.training.pipeline.plan`); ``config.yaml`` is the resolved config
    (:func:`mtdnn.training.resolve.resolve_config`) with a
    ``resolved`` section (the encoder loaded, the task definitions, the data's fingerprints).

    Args:
        overwrite: replace a run directory that holds a run (complete or interrupted).
        resume: continue the interrupted run in ``config.output_dir`` from ``checkpoints/last.ckpt``.

    Returns:
        The :class:`~mtdnn.training.runs.Run` (its ``metrics`` and ``best`` on rank 0).

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, data, encoder or run directory (an interrupted run
            without ``resume`` or ``overwrite`` included).
        Interrupted: Ctrl-C (exit code 130) or SIGTERM (143); ``last.ckpt`` is kept for ``resume``.
    """

    run = pipeline.plan(config, overwrite=overwrite, resume=resume, prepare=_write_carves)
    pipeline.execute(run)
    return Run(run.run_dir)


def _write_carves(plan) -> None:
    """``carves.json``: the articles of each side of a carve by article (SQuAD), for the record (``plan``: a
    :class:`~mtdnn.training.pipeline.Plan`)."""

    carves = article_lists(plan.tasks, Path(plan.config.data_dir))
    if carves:
        write_json_atomic(plan.run_dir / CARVES_FILE, carves)
