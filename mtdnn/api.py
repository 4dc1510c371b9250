"""The Python API: the commands' code paths as functions, taking typed configs and specs.

Example::

    import mtdnn

    run = mtdnn.fit(mtdnn.TrainConfig(task_defs="task_defs/glue.yaml", tasks=["rte", "sst2"], max_epochs=1))
    print(run.best["average"], run.export)
    model = mtdnn.load(run.export)
    model.predict([("The cat sat.", "A cat was sitting.")], task="rte")
    model.evaluate("rte", "dev")

Errors are the toolkit's exception types (:mod:`mtdnn.errors`) with the messages the commands print; an
interrupted training raises :class:`~mtdnn.errors.Interrupted`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .distillation.specs import TeacherSpec, load_spec
from .distillation.student import StudentSpec
from .distillation.student import distill as distill_specs
from .distillation.teachers import build
from .errors import ConfigError, check_bools, validate
from .evaluation.model import TrainedModel, load
from .evaluation.transfer import TransferSpec, run_transfer
from .tasks.data import resolve_data_dir
from .training.config import TrainConfig, load_config, validate_config
from .training.runs import Run
from .training.trainer import fit as fit_config

__all__ = ["TrainConfig", "Run", "TrainedModel", "fit", "load", "build_teachers", "distill", "transfer"]


def fit(config: TrainConfig | dict | str | Path, *, overwrite: bool = False, resume: bool = False) -> Run:
    """Train, select on dev and export one run (``python -m mtdnn.train``'s code path).

    Args:
        config: a :class:`TrainConfig`, a mapping of its fields, or a config file (a run's ``config.yaml``).
        overwrite: replace a run directory holding a complete run. resume: continue an interrupted run.

    Returns:
        The :class:`Run`: ``run.metrics``, ``run.best``, ``run.export``, ``run.directory``, ...

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, data or run directory (nothing written).
        Interrupted: Ctrl-C or SIGTERM during training.
    """

    if isinstance(config, dict):
        config = validate_config(config, "fit(config)")
    elif isinstance(config, (str, Path)):
        path = config
        config = load_config(path)
        if config.trust_remote_code:  # a file cannot allow code to run; a TrainConfig built in Python can
            raise ConfigError(f"fit({str(path)!r}): field 'trust_remote_code' is true in the file; pass a TrainConfig "
                              "(or a mapping) whose trust_remote_code field is true to allow an encoder's own code")
    elif not isinstance(config, TrainConfig):
        raise ConfigError(f"fit(config): expected a TrainConfig, a mapping of its fields or a config file path "
                          f"(got {type(config).__name__})")
    return fit_config(config, overwrite=overwrite, resume=resume)


def _spec(spec, model, kind: str):
    if isinstance(spec, model):
        return spec, f"{kind} spec"
    if not isinstance(spec, (str, os.PathLike)):
        raise ConfigError(f"{kind} spec: expected a {model.__name__} or the path of its YAML file (got "
                          f"{type(spec).__name__} {spec!r:.40})")
    return load_spec(spec, model, kind), str(spec)


def _data_dir(data_dir):
    return resolve_data_dir(None if data_dir is None else str(data_dir))


def build_teachers(spec: TeacherSpec | str | Path, *, from_run: str | None = None, output_dir: str | None = None,
                   data_dir: str | Path | None = None, lightning: dict | None = None,
                   retrain_changed: bool = False) -> Path:
    """Build (or resume) teacher ensembles and cache their outputs (``python -m mtdnn.teachers``'s code path).

    Args:
        spec: a :class:`~mtdnn.distillation.specs.TeacherSpec` or its YAML file.
        lightning: Lightning settings of the members' runs (TrainConfig fields: accelerator, devices, ...).

    Returns:
        The teacher directory (``teachers.json`` and ``teachers.md`` hold the report).
    """

    check_bools("build_teachers()", retrain_changed=retrain_changed)
    spec, source = _spec(spec, TeacherSpec, "teacher")
    return build(spec, source, _data_dir(data_dir), from_run, output_dir, lightning, retrain_changed)


def distill(student, teachers=None, *, data_dir: str | Path | None = None, from_run: str | None = None,
            teachers_dir: str | None = None, output_dir: str | None = None, lightning: dict | None = None,
            overwrite: bool = False, retrain_changed: bool = False) -> Run:
    """Train a multi-task student on teacher soft targets (``python -m mtdnn.distill``'s code path).

    Args:
        student: a :class:`~mtdnn.distillation.student.StudentSpec` or its YAML file.
        teachers: a teacher spec (or file) to build first; None uses the student spec's teacher directory.

    Returns:
        The student's :class:`Run` (``report.json`` and ``report.md`` in its directory).
    """

    check_bools("distill()", overwrite=overwrite, retrain_changed=retrain_changed)
    spec, source = _spec(student, StudentSpec, "student")
    teacher_spec, teacher_source = _spec(teachers, TeacherSpec, "teacher") if teachers is not None else (None, None)
    return distill_specs(spec, source, teacher_spec, teacher_source, data_dir=_data_dir(data_dir), from_run=from_run,
                         teachers_dir=teachers_dir, output_dir=output_dir, lightning=lightning, overwrite=overwrite,
                         retrain_changed=retrain_changed)


def transfer(spec=None, **settings) -> dict:
    """A few-shot transfer sweep (``python -m mtdnn.transfer``'s code path): fine-tune each encoder on seeded nested
    subsets of a task and score the evaluation split once.

    Args:
        spec: a :class:`~mtdnn.evaluation.transfer.spec.TransferSpec`; or give its fields as keywords, e.g.
            ``transfer(task="snli", encoders=["packaged-minilm", "runs/<mt-run>"], sizes=[200, 549], seeds=3)``.

    Returns:
        The report (``results.json``; ``results.md`` and ``learning_curve.png`` beside it).

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, data or runs, before any training.
        Interrupted: Ctrl-C (finished runs are kept and reused by a rerun).
    """

    if spec is None:
        spec = validate(TransferSpec, settings, "transfer()")
    elif not isinstance(spec, TransferSpec):
        raise ConfigError(f"transfer(spec): expected a TransferSpec, or its fields as keywords, e.g. "
                          f"transfer(task='snli', encoders=['packaged-minilm'], sizes=[200]) (got "
                          f"{type(spec).__name__} {spec!r:.40})")
    elif settings:
        raise ConfigError(f"transfer(): give a TransferSpec or keywords, not both (got {', '.join(settings)})")
    return run_transfer(spec)
