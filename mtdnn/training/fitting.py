"""Fitting a planned run with its one ``pl.Trainer``: the Trainer's construction (the only one in the toolkit),
the callbacks of a run directory, the faults a fit can end in, and what rank 0 writes after it.

:func:`mtdnn.training.pipeline.execute` calls :func:`fit_plan`; see :mod:`mtdnn.training.pipeline`.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from ..errors import RANK_LOST_EXIT_CODE, SIGTERM_EXIT_CODE, Diverged, Interrupted, RankLost
from ..fileio import write_json_atomic
from .callbacks import EvaluateAtMaxSteps, NonFiniteGuard, ResumeRNG, TrainingDiverged
from .export import export_model
from .flags import planned_steps, trainer_strategy
from .logs import PrintRunSummary, build_loggers
from .progress import TrainingProgress, progress_bar
from .plans import Plan, Result
from .resume import check_world_size
from .rng import RANK_RNG_FILE
from .runs import (
    CHECKPOINT_DIR,
    DIVERGED_EXIT_CODE,
    EXPORT_DIR,
    METRICS_FILE,
    SCHEDULE_FILE,
    AtomicCheckpointIO,
    check_finite_run,
    load_checkpoint_file,
)
from .stopping import SaveLastCheckpoint, graceful_stop_connector, install_patient_process_observer, is_peer_failure
from .summaries import metrics_summary, schedule_summary


def build_trainer(plan: Plan, callbacks: list, resume_step: int | None = None):
    """The run's ``pl.Trainer``: the one place the toolkit constructs one.

    A run with a run directory gets its loggers under ``logs/``, the atomic checkpoint I/O and dev evaluation at
    epoch ends or every ``eval_every_n_steps``; a fine-tune without one (transfer) gets no loggers, checkpoints or
    dev evaluation.
    """

    config, run_dir = plan.config, plan.run_dir
    kwargs: dict[str, Any] = {}
    if plan.outputs.run_dir:
        kwargs.update(logger=build_loggers(config, run_dir, resume_step), plugins=[AtomicCheckpointIO()],
                      default_root_dir=run_dir, log_every_n_steps=10)
        if config.eval_every_n_steps:  # Lightning counts batches; across epochs, not at epoch ends
            kwargs.update(val_check_interval=config.eval_every_n_steps * config.accumulate_grad_batches,
                          check_val_every_n_epoch=None)
    else:
        kwargs.update(logger=False, enable_checkpointing=False, limit_val_batches=0, num_sanity_val_steps=0,
                      default_root_dir=plan.root_dir)
    # no model-summary table (its FLOPs column reads 0 for a model Lightning cannot trace); a progress bar on a
    # terminal, without v_num; plain lines instead where the output is a file (TrainingProgress)
    kwargs.update(enable_model_summary=False)
    plain = any(isinstance(c, TrainingProgress) and c.prints() for c in callbacks)
    if not plan.outputs.progress or plain:
        kwargs.update(enable_progress_bar=False)
    else:
        callbacks = [*callbacks, progress_bar()]
    return pl.Trainer(max_epochs=config.max_epochs, max_steps=config.max_steps or -1,
                      accumulate_grad_batches=config.accumulate_grad_batches, accelerator=config.accelerator,
                      devices=config.devices, num_nodes=config.num_nodes, strategy=trainer_strategy(config.strategy),
                      precision=config.precision, gradient_clip_val=config.gradient_clip or None,
                      deterministic=config.deterministic, use_distributed_sampler=False, callbacks=callbacks,
                      **kwargs)


def fit_plan(plan: Plan, extra_callbacks: list) -> Result:
    """Train ``plan.module`` with the run's Trainer; on rank 0 export and write the summaries (see
    :func:`mtdnn.training.pipeline.execute`, which raises what this raises)."""

    if not plan.outputs.run_dir:  # a fine-tune: no checkpoints, no dev evaluation, Lightning's own signal handling
        trainer = build_trainer(plan, [NonFiniteGuard(), *extra_callbacks])
        trainer.fit(plan.module, datamodule=plan.datamodule)
        return Result(None, plan.module, trainer)

    config, run_dir, module = plan.config, plan.run_dir, plan.module
    last_path = run_dir / CHECKPOINT_DIR / "last.ckpt"
    # best.ckpt by the dev average (saved after each dev evaluation); last.ckpt at every epoch end, listed after
    # it so that it holds the updated best-score state.
    checkpoint = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="best", monitor="dev/average",
                                 mode="max", save_top_k=1, auto_insert_metric_name=False, enable_version_counter=False,
                                 save_weights_only=True)  # weights (and hyper-parameters) only: a third of the size
    last = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="last", monitor=None, save_top_k=1,
                           every_n_epochs=1, save_on_train_epoch_end=True, auto_insert_metric_name=False,
                           enable_version_counter=False)
    callbacks = [NonFiniteGuard(), ResumeRNG(), checkpoint, last,
                 SaveLastCheckpoint(last_path, config.checkpoint_every_n_steps), PrintRunSummary(),
                 TrainingProgress(config.progress_every_n_steps if plan.outputs.progress else 0),
                 EvaluateAtMaxSteps(), *extra_callbacks]
    early_stopping = None
    if config.early_stopping_patience:
        early_stopping = EarlyStopping(monitor="dev/average", mode="max", patience=config.early_stopping_patience,
                                       check_on_train_epoch_end=False)
        callbacks.append(early_stopping)
    # One continuous log: a resumed run continues logs/metrics.csv (rows after its checkpoint are logged again)
    # and writes its TensorBoard events beside the first part's, so TensorBoard shows one run.
    resume_from = plan.resume_from
    resume_step = load_checkpoint_file(resume_from)["global_step"] if resume_from else None
    trainer = build_trainer(plan, callbacks, resume_step)
    if resume_from is not None:
        check_world_size(resume_from, trainer.world_size)
    # SIGTERM: the ranks agree to stop at a step boundary (SaveLastCheckpoint), never in the signal handler
    stopper = trainer._signal_connector = graceful_stop_connector(trainer, last_path)
    install_patient_process_observer()
    sigint = signal.getsignal(signal.SIGINT)
    try:
        # the checkpoint holds tensors and plain values only (RNG states included): no pickled objects on resume
        trainer.fit(module, datamodule=plan.datamodule, ckpt_path=resume_from, weights_only=True)
    except SystemExit:  # Lightning exits after a graceful shutdown on Ctrl-C or SIGTERM
        if not trainer.interrupted:
            raise
    except TrainingDiverged as err:
        kept = (f"the last checkpoint before it is kept: {last_path}" if last_path.is_file()
                else "no checkpoint had been saved before it")
        raise Diverged(f"{err}; {kept}; no metrics.json written", DIVERGED_EXIT_CODE) from None
    except Exception as err:
        if trainer.world_size <= 1 or not is_peer_failure(err):
            raise
        kept = f"resume with --resume (from {last_path})" if last_path.is_file() else "no checkpoint was saved yet"
        if stopper.requested or stopper.received_sigterm:  # stopping on SIGTERM when a peer went first
            raise Interrupted(f"rank {trainer.global_rank}: SIGTERM: another rank ended first; {kept}; no "
                              "metrics.json written",
                              SIGTERM_EXIT_CODE) from None
        first_line = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise RankLost(f"rank {trainer.global_rank}: another rank of this {trainer.world_size}-process run died "
                       f"(its collective failed here: {first_line}); this rank stops too; {kept}; no metrics.json "
                       "written", RANK_LOST_EXIT_CODE) from None
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt
        if trainer.world_size <= 1:  # no peer to wait for; the caller's process goes on (the API, tests)
            stopper.cancel_watchdog()
    if trainer.interrupted:
        hint = (f"resume with --resume (from {last_path})" if last_path.is_file()
                else "no checkpoint was saved yet (they are saved at epoch ends, every --checkpoint-every-n-steps "
                     "and on SIGTERM)")
        sigterm = stopper.requested or trainer.received_sigterm
        rank = f"rank {trainer.global_rank}: " if trainer.world_size > 1 else ""
        raise Interrupted(f"{rank}{'SIGTERM' if sigterm else 'Ctrl-C'}: {hint}; no metrics.json written",
                          SIGTERM_EXIT_CODE if sigterm else 130)
    stopped = early_stopping is not None and early_stopping.wait_count >= early_stopping.patience
    expected_steps = planned_steps(config, len(plan.datamodule.train_sampler))
    if not stopped and trainer.global_step != expected_steps:
        raise RuntimeError(f"training ended after {trainer.global_step} optimizer steps, expected {expected_steps}")
    if not trainer.is_global_zero:
        return Result(None, module, trainer)
    stop = {"step": trainer.global_step, "epoch": trainer.current_epoch + 1,
            "patience": early_stopping.patience} if stopped else None
    summary = _write_outputs(plan, checkpoint, stop)
    if not config.keep_last_checkpoint:  # the run is complete: nothing to resume
        last_path.unlink(missing_ok=True)
        for rng_file in (run_dir / CHECKPOINT_DIR).glob(RANK_RNG_FILE.format(rank="*")):
            rng_file.unlink(missing_ok=True)
    return Result(summary, module, trainer)


def _write_outputs(plan: Plan, checkpoint, stopped_early: dict | None) -> dict:
    """Rank 0, after training: load the best checkpoint, export it, write ``schedule.json`` and (last)
    ``metrics.json``, as ``plan.outputs`` asks; return the metrics summary.

    Raises:
        Diverged: no evaluation had a finite dev average, or the best checkpoint holds non-finite weights.
    """

    config, run_dir, module = plan.config, plan.run_dir, plan.module
    if not checkpoint.best_model_path:  # every evaluation's dev average was NaN or inf (max steps evaluate too)
        raise Diverged(f"{run_dir}: training diverged: no evaluation had a finite dev average, so there is no best "
                       "checkpoint; the run is not complete (no metrics.json). Lower --lr or --weight-decay, keep "
                       "--gradient-clip on, and start again", DIVERGED_EXIT_CODE)
    best_path = Path(checkpoint.best_model_path)
    best_state = load_checkpoint_file(best_path)["state_dict"]
    check_finite_run(best_state, module.dev_history, best_path)  # a diverged run is never written as complete
    module.load_state_dict(best_state)
    module.model.cpu().float()
    if plan.outputs.export:
        # the export truncates as the run did: --max-length overrides each task's max_length in what it writes
        # (tasks.yaml, each Hugging Face folder's tokenizer model_max_length)
        trained = {n: t if not config.max_length else t.model_copy(update={"max_length": config.max_length})
                   for n, t in plan.tasks.items()}
        export_model(module.model, plan.tokenizer, trained, run_dir / EXPORT_DIR, source_encoder=plan.source_encoder,
                     hf=config.export_hf)
    if plan.outputs.schedule:
        write_json_atomic(run_dir / SCHEDULE_FILE, schedule_summary(module.step_log, config.schedule,
                                                                    config.batch_size, config.accumulate_grad_batches))
    summary = metrics_summary(module.dev_history, best_path, run_dir, stopped_early)
    if plan.outputs.metrics:
        write_json_atomic(run_dir / METRICS_FILE, summary)
    return summary
