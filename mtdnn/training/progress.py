"""How a run says how it is going: per-task training loss in ``logs/metrics.csv``, plain progress lines in a log
file, and a progress bar without Lightning's ``v_num``.

A multi-task step trains one task (MT-DNN Algorithm 1), so one training-loss column mixing the tasks' losses
(cross-entropy beside squared error) says little. :class:`TrainingProgress` keeps, per task, the sum of the
losses of its batches since the last logging step (device tensors added on the device: no host synchronisation
in the training step) and, every ``log_every_n_steps`` optimizer steps, logs their means as ``train/<task>_loss``,
one column per task (a task with no batch in that window has no value). When standard error is not a terminal
(``nohup ... > log 2>&1 &``, a cluster job's log), where a progress bar cannot be drawn, it also prints one line
every ``progress_every_n_steps`` optimizer steps, as the Hugging Face ``Trainer`` and MT-DNN's ``train.py`` do::

    step 50/288 (17%)  epoch 1/2  loss mrpc 0.6213 rte 0.6931 stsb 2.1040  lr 4.10e-05  41.3 examples/s  0:05:12 left

and one line per dev evaluation with every task's scores and the average::

    dev step 144 epoch 1: mrpc accuracy 0.7108 f1 0.8122 | rte accuracy 0.5921 | average 0.6615

Reading the sums on the host (``.item()``) happens at those logging steps only.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from contextlib import contextmanager
from typing import TextIO

import pytorch_lightning as pl
from datasets.utils import logging as datasets_logging
from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
from transformers.utils import logging as transformers_logging


def _duration(seconds: float) -> str:
    """``0:05:12``: hours, minutes, seconds."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _Window:
    """Per-task loss sums (0-d device tensors) and batch counts, and the examples, since the window opened."""

    def __init__(self, step: int):
        self.step, self.opened = step, time.monotonic()
        self.sums: dict = {}
        self.batches: dict[str, int] = {}
        self.examples = 0

    def add(self, task: str, loss, examples: int) -> None:
        loss = loss.detach().float()
        self.sums[task] = loss if task not in self.sums else self.sums[task] + loss
        self.batches[task] = self.batches.get(task, 0) + 1
        self.examples += examples

    def means(self) -> dict[str, float]:
        """Per task, the mean loss of its batches in the window (one host read per task)."""
        return {task: float(self.sums[task]) / self.batches[task] for task in sorted(self.sums)}


class TrainingProgress(pl.Callback):
    """Per-task training-loss columns in the run's loggers and, when ``stream`` is not a terminal, plain progress
    and dev-evaluation lines (see the module docstring).

    Args:
        print_every_n_steps: optimizer steps between progress lines (0: none).
        stream: where the lines go (default: standard error, where the run summary goes).
        plain: print lines whatever the stream (default: only when it is not a terminal).
    """

    def __init__(self, print_every_n_steps: int = 50, stream: TextIO | None = None, plain: bool | None = None):
        self.print_every = print_every_n_steps
        self.stream = stream
        self.plain = plain
        self._logged = self._printed = None
        self._started = 0.0
        self._start_step = 0
        self._evaluating: float | None = None

    @property
    def out(self) -> TextIO:
        return self.stream or sys.stderr

    def prints(self) -> bool:
        """Whether progress lines are printed: a positive interval and a stream that is not a terminal."""
        if self.print_every <= 0:
            return False
        return self.plain if self.plain is not None else output_is_plain(self.out)

    def on_train_start(self, trainer, pl_module) -> None:
        step = trainer.global_step
        self._logged, self._printed = _Window(step), _Window(step)
        self._started, self._start_step = time.monotonic(), step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None or self._logged is None:
            return
        examples = len(batch.weight) if batch.examples is None else int(batch.examples)
        self._logged.add(batch.task, loss, examples)
        self._printed.add(batch.task, loss, examples)
        step = trainer.global_step
        every = max(1, trainer.log_every_n_steps)
        if step != self._logged.step and step % every == 0:
            means = self._logged.means()
            if trainer.loggers and trainer.is_global_zero:
                row = {f"train/{task}_loss": value for task, value in means.items()}
                for logger in trainer.loggers:
                    logger.log_metrics({**row, "epoch": trainer.current_epoch}, step=step)
            if not self.prints():  # a terminal: the bar shows the same means (host floats, no synchronisation)
                for task, value in means.items():
                    pl_module.log(f"loss/{task}", value, prog_bar=True, logger=False, on_step=True, on_epoch=False)
            self._logged = _Window(step)
        if self.prints() and step != self._printed.step and step % self.print_every == 0:
            if trainer.is_global_zero:
                print(self.progress_line(trainer, self._printed), file=self.out, flush=True)
            self._printed = _Window(step)

    def progress_line(self, trainer, window: _Window) -> str:
        """``step s/total (p%)  epoch e/E  loss <task> <mean> ...  lr <lr>  <n> examples/s  <h:mm:ss> left``."""
        step = trainer.global_step
        if trainer.max_steps and trainer.max_steps > 0:
            total = trainer.max_steps
        elif hasattr(trainer.lightning_module, "total_steps"):  # from the schedule (MultiTaskModule)
            total = int(trainer.lightning_module.total_steps())
        else:
            total = int(trainer.estimated_stepping_batches)
        elapsed = time.monotonic() - window.opened
        rate = window.examples / elapsed if elapsed > 0 else 0.0
        done = step - self._start_step
        per_step = (time.monotonic() - self._started) / done if done > 0 else 0.0
        losses = " ".join(f"{task} {value:.4f}" for task, value in window.means().items())
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        return (f"step {step}/{total} ({100 * step / max(total, 1):.0f}%)  epoch {trainer.current_epoch + 1}{epochs}  "
                f"loss {losses}  lr {lr:.2e}  {rate:.1f} examples/s  {_duration(per_step * max(total - step, 0))} left")

    def on_validation_start(self, trainer, pl_module) -> None:
        self._evaluating = time.monotonic()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._printed is not None and self._evaluating is not None:  # examples/s counts training time only
            self._printed.opened += time.monotonic() - self._evaluating
        self._evaluating = None
        if trainer.sanity_checking or not self.prints() or not trainer.is_global_zero:
            return
        history = getattr(pl_module, "dev_history", None)
        if history:
            print(self.dev_line(history[-1]), file=self.out, flush=True)

    @staticmethod
    def dev_line(entry: dict) -> str:
        """``dev step s epoch e: <task> <metric> <score> ... | ... | average <a>`` from one ``dev_history`` entry."""
        tasks = " | ".join(f"{task} " + " ".join(f"{metric} {value:.4f}" for metric, value in scores.items())
                           for task, scores in entry["tasks"].items())
        return f"dev step {entry['step']} epoch {entry['epoch']}: {tasks} | average {entry['average']:.4f}"


class _NoVersion:
    """Drops Lightning's ``v_num`` (the logger's version, meaningless for a run directory) from the bar."""

    def get_metrics(self, trainer, pl_module):
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


class RichBar(_NoVersion, RichProgressBar):
    """Lightning's rich progress bar without ``v_num``."""


class TQDMBar(_NoVersion, TQDMProgressBar):
    """Lightning's tqdm progress bar without ``v_num`` (where rich is not installed)."""


def progress_bar() -> pl.Callback:
    """The bar Lightning would choose (rich when installed, else tqdm), without ``v_num``."""
    try:
        import rich  # noqa: F401  lazy: an optional dependency, asked for here
    except ImportError:
        return TQDMBar()
    return RichBar()


QUIET_MESSAGES = ("try installing [litlogger]", "`weights_only` was not set")
"""Lightning log messages a user of this toolkit cannot act on (a tip to install a cloud logger; checkpoints are
loaded with ``weights_only=True`` where the toolkit loads them)."""
QUIET_LOGGERS = ("pytorch_lightning.utilities.rank_zero", "pytorch_lightning.trainer.connectors.checkpoint_connector",
                 "lightning.pytorch.utilities.rank_zero", "lightning_fabric.utilities.rank_zero")


class _DropMessages(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in QUIET_MESSAGES)


@contextmanager
def quiet_libraries(plain: bool):
    """While a run is planned or trained: drop :data:`QUIET_MESSAGES`, and with ``plain`` (the output is a log
    file, not a terminal) turn off the Hugging Face progress bars (loading weights, saving tokenized splits), which
    a file shows as noise. Everything is restored on exit: nothing process-wide is left changed."""
    drop = _DropMessages()
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    for logger in loggers:
        logger.addFilter(drop)
    bars = [(m, m.is_progress_bar_enabled()) for m in (transformers_logging, datasets_logging)] if plain else []
    for module, _ in bars:
        module.disable_progress_bar()
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)
        for module, enabled in bars:
            if enabled:
                module.enable_progress_bar()


def output_is_plain(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: standard error) is not a terminal: progress goes there as plain lines."""
    stream = stream or sys.stderr
    return not (hasattr(stream, "isatty") and stream.isatty())


def quietly(function):
    """``function`` run inside :func:`quiet_libraries` (plain when standard error is not a terminal): how
    :func:`mtdnn.training.pipeline.plan` and ``execute`` keep library noise out of a run's output."""

    @functools.wraps(function)
    def quiet(*args, **kwargs):
        with quiet_libraries(output_is_plain()):
            return function(*args, **kwargs)

    return quiet
