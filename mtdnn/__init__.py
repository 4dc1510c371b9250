"""mtdnn: multi-task learning and knowledge distillation of transformer encoders (MT-DNN, MT-DNN-KD).

The subpackages follow the pipeline, and a lower stage never imports a higher one:
task definitions, data and schedules (:mod:`mtdnn.tasks`) -> encoder, heads, losses and metrics
(:mod:`mtdnn.modeling`) -> the task types, one class each (:mod:`mtdnn.tasktypes`) -> TrainConfig, Lightning module, Trainer, run directory and export
(:mod:`mtdnn.training`) -> teachers, soft targets and student (:mod:`mtdnn.distillation`); evaluate, predict and
transfer (:mod:`mtdnn.evaluation`). On top: the Python API (:mod:`mtdnn.api`, re-exported here and imported on
first use, so ``import mtdnn`` stays light) and the command-line glue (:mod:`mtdnn.cli`); ``mtdnn <command>``,
``python -m mtdnn <command>`` and ``python -m mtdnn.<command>`` run each command.
"""

import importlib
import importlib.metadata

try:
    __version__ = importlib.metadata.version("mtdnn")  # written once: pyproject.toml's [project] version
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

from . import tasktypes  # noqa: E402,F401  fills the registry of task types (mtdnn.tasks.types) before any use; no torch

_API = ("TrainConfig", "Run", "TrainedModel", "fit", "load", "build_teachers", "distill", "transfer")
__all__ = list(_API)


_COMMANDS = ("distill", "transfer")  # also the python -m entry points: callable modules (mtdnn.cli.callable_command)


def __getattr__(name: str):
    if name in _COMMANDS:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _API:
        # keeps torch out of import time
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'mtdnn' has no attribute {name!r}")
