"""The run's step and epoch logs (``logs/metrics.csv``): one continuous file across an interruption and resume.

Lightning's CSV logger empties ``metrics.csv`` when it finds one, so a resumed run would either lose the first part
or need a directory of its own. :class:`ResumableCSVLogger` keeps the rows logged before the checkpoint the run
resumes from, drops those logged after it (they are logged again), and appends.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path

import pytorch_lightning as pl
from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from ..fileio import make_dir, write_atomic
from .config import TrainConfig

WANDB_MODE_ENV = "WANDB_MODE"
MLFLOW_URI_ENV = "MLFLOW_TRACKING_URI"

class _ContinuedWriter(ExperimentWriter):
    """An experiment writer that keeps the rows of ``metrics.csv`` up to ``resume_step`` and appends after them."""

    def __init__(self, log_dir: str, resume_step: int | None):
        self.resume_step = resume_step
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self.resume_step is None:
            super()._check_log_dir_exists()
            return
        if not path.is_file():  # interrupted before anything was logged
            return
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            keys, rows = list(reader.fieldnames or []), list(reader)
        # every row's step is the optimizer steps done when it was logged (the module logs it with the dev scores
        # and the epoch's losses): rows up to the checkpoint's step describe work it holds; later ones come again
        kept = [r for r in rows if not r.get("step") or int(float(r["step"])) <= self.resume_step]
        if len(kept) != len(rows):  # rows logged after the checkpoint are logged again by the resumed run
            text = _csv_text(keys, kept)
            write_atomic(path, text)
        self.metrics_keys = keys


def _csv_text(keys: list[str], rows: list[dict]) -> str:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=keys, lineterminator=os.linesep)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` writing ``<save_dir>/<name>/metrics.csv`` (no version directory), continued on resume.

    Args:
        resume_step: the global step of the checkpoint the run resumes from (None: a new run, the file is replaced).
    """

    def __init__(self, save_dir: str | Path, name: str = "logs", resume_step: int | None = None):
        super().__init__(save_dir, name=name, version="")
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            make_dir(self.root_dir)
            self._experiment = _ContinuedWriter(self.log_dir, self.resume_step)
        return self._experiment


def run_summary(trainer, datamodule) -> str:
    """What a training run is about to do, printed before its first step: per task the train and dev examples,
    the optimizer steps per epoch and in all, the global batch, the device(s) and the precision."""
    tasks = list(datamodule.tasks)

    def count(split) -> str:  # a windowed split (span extraction) also gives its windows
        windows = f" in {len(split)} windows" if split.num_examples != len(split) else ""
        return f"{split.num_examples}{windows}"

    lines = ["training " + ", ".join(
        f"{name} ({count(split)} train" + (f", {count(datamodule.dev_sets[name])} dev"
                                           if name in datamodule.dev_sets else ", no dev") + ")"
        for name, split in zip(tasks, datamodule.train_sets))]
    per_epoch = len(datamodule.train_sampler)
    lines.append(f"{per_epoch} optimizer steps per epoch x {trainer.max_epochs} epochs = "
                 f"{per_epoch * trainer.max_epochs} steps, global batch {datamodule.batch_size} "
                 f"({datamodule.schedule} schedule)")
    device = trainer.strategy.root_device
    lines.append(f"device: {device.type}{'' if device.index is None else f':{device.index}'} x "
                 f"{trainer.num_devices * trainer.num_nodes} ({type(trainer.strategy).__name__}), "
                 f"precision {trainer.precision}")
    limits = [f"{what} limited to the first {n} rows per task" for what, n in
              (("train", datamodule.limit_train_examples), ("dev", getattr(datamodule, "limit_eval_examples", None)))
              if n]
    if limits:
        lines.append("; ".join(limits))
    if trainer.global_step:
        lines.append(f"resuming at step {trainer.global_step} (epoch {trainer.current_epoch + 1})")
    return "\n".join(lines)


class PrintRunSummary(pl.Callback):
    """Print :func:`run_summary` on rank 0 (stderr) when training starts (after the data is set up)."""

    def on_train_start(self, trainer, pl_module):
        if trainer.is_global_zero and trainer.datamodule is not None:
            print(run_summary(trainer, trainer.datamodule), file=sys.stderr, flush=True)


def build_loggers(config: TrainConfig, run_dir: Path, resume_step: int | None = None) -> list:
    """Lightning loggers by name, writing under ``run_dir/logs`` unless their own environment says otherwise.

    ``config.loggers`` None: CSV only (TensorBoard, W&B and MLflow log only when asked for, whatever is installed).
    W&B runs offline into ``logs/`` unless ``$WANDB_MODE`` is set (then W&B follows it: ``online`` with
    ``$WANDB_API_KEY`` logs to the server); MLflow writes a local file store under ``logs/mlruns`` unless
    ``$MLFLOW_TRACKING_URI`` names a tracking server or store. ``resume_step`` (a resumed run's checkpoint step)
    makes the CSV log continue the first part's ``logs/metrics.csv``.
    """
    names = config.loggers or ["csv"]
    loggers = []
    for name in names:
        if name == "csv":
            loggers.append(ResumableCSVLogger(run_dir, name="logs", resume_step=resume_step))
        elif name == "tensorboard":
            loggers.append(TensorBoardLogger(run_dir, name="logs", version="tensorboard"))
        elif name == "wandb":
            make_dir(run_dir / "logs")
            loggers.append(WandbLogger(save_dir=str(run_dir / "logs"), offline=wandb_offline(),
                                       name=run_dir.name, log_model=False))
        elif name == "mlflow":
            loggers.append(MLFlowLogger(experiment_name="mtdnn", run_name=run_dir.name,
                                        tracking_uri=mlflow_tracking_uri(run_dir)))
    return loggers


def wandb_offline() -> bool:
    """W&B runs offline unless ``$WANDB_MODE`` is set (W&B then reads it itself: ``online``, ``offline``, ...)."""
    return not os.environ.get(WANDB_MODE_ENV)


def mlflow_tracking_uri(run_dir: Path) -> str:
    """``$MLFLOW_TRACKING_URI`` when set (a tracking server or store), else a file store under ``run_dir/logs``."""
    return os.environ.get(MLFLOW_URI_ENV) or (Path(run_dir) / "logs" / "mlruns").resolve().as_uri()
