"""Checks of a run's engineering settings before anything is written: Lightning flags (without building a
Trainer), CPU processes, loggers, the dev-evaluation interval, the encoder's position limit.

Each check raises :class:`~mtdnn.errors.ConfigError` naming the flag; :func:`mtdnn.training.pipeline.plan` calls
them all.
"""

from __future__ import annotations

import logging
import math
import os
import warnings

from ..errors import ConfigError
from .config import LOGGERS, TrainConfig


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
    # keeps torch out of import time
    import torch

    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    cores = os.cpu_count() or 1
    if on_cpu and isinstance(devices, int) and devices > cores:
        raise ConfigError(f"--devices {devices}: on the CPU each device is a process, and this machine has {cores} "
                          f"core(s); use --devices {cores} or fewer")


PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")


def _check_connector(**flags) -> None:
    """Let Lightning's accelerator connector, the part of ``pl.Trainer.__init__`` that validates these flags, judge
    them: no Trainer is built (the pipeline builds the run's one Trainer, :func:`mtdnn.training.pipeline.execute`).
    """
    # keeps torch out of import time
    from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector

    kwargs = {**flags, "strategy": trainer_strategy(flags.get("strategy", "auto"))}
    _AcceleratorConnector(**kwargs, use_distributed_sampler=False)


def valid_precisions(**flags) -> list[str]:
    """The :data:`PRECISIONS` that Lightning accepts together with the other ``flags`` (accelerator, devices...)."""
    valid = []
    logging.disable(logging.INFO)  # Lightning announces what it finds (GPU available, ...)
    try:
        with warnings.catch_warnings():  # and warns of the precisions it substitutes
            warnings.simplefilter("ignore")
            for precision in PRECISIONS:
                try:
                    _check_connector(**{**flags, "precision": precision})
                    valid.append(precision)
                except Exception:  # noqa: BLE001 - any refusal means "not valid here"
                    pass
    finally:
        logging.disable(logging.NOTSET)
    return valid


def check_lightning_flags(**flags) -> None:
    """Validate Lightning flags as ``pl.Trainer`` would (:func:`_check_connector`), before any file is written.

    Args:
        flags: Trainer arguments named as the CLI flags (``accelerator``, ``devices``, ``strategy``, ``precision``,
            ``num_nodes``); those given are quoted in the error.

    Raises:
        ConfigError: Lightning rejects the combination; when the precision is what it refuses, the message
            names the precisions it accepts with the other flags.
    """
    try:
        _check_connector(**flags)
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
        # keeps torch out of import time
        from pytorch_lightning.strategies import DDPStrategy

        return DDPStrategy(find_unused_parameters=True)
    return name


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
