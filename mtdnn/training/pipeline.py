"""The one training pipeline: a run is *planned*, then *executed*.

Every training path goes through it and supplies only what differs: ``python -m mtdnn.train`` and each teacher
member (:func:`mtdnn.training.trainer.fit`), the student (:mod:`mtdnn.distillation.student`), each few-shot transfer
fine-tune (:mod:`mtdnn.evaluation.transfer.finetune`) and the diagnostics' partial-input runs (through ``fit``)::

    plan = pipeline.plan(config, module_factory=..., datamodule_factory=..., resolved={...})  # creates nothing
    result = pipeline.execute(plan)                                  # the run's one pl.Trainer, fit, export, ...

:func:`plan` checks everything that can be wrong (settings, Lightning flags without building a Trainer, speed
flags, loggers, the run directory, data files, the encoder's lengths and positions, resume) and builds the
tokenizer, the module, the data module and the resolved ``config.yaml`` document. :func:`execute` tokenizes,
takes the run directory, writes ``config.yaml``, builds the one ``pl.Trainer`` (:func:`build_trainer`, the only
place one is constructed), fits, and writes what the path's :class:`Outputs` ask for: the export of the best model,
``schedule.json`` and, last, ``metrics.json``.
"""

from __future__ import annotations

import logging
import math
import signal
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import (RANK_LOST_EXIT_CODE, SIGTERM_EXIT_CODE, CheckpointError, ConfigError, Diverged, Interrupted,
                      RankLost, check_bools)
from ..fileio import read_json, write_json_atomic, write_yaml_atomic
from ..tasks.taskdef import TaskDef
from .config import RESOLVED_KEY, TrainConfig
from .runs import RUN_ENTRIES, DIVERGED_EXIT_CODE

log = logging.getLogger("mtdnn.train")

QUIET_WARNINGS = (".*does not have many workers.*", ".*predefined batch sampler.*", ".*LeafSpec.*")
"""Lightning warnings a user cannot act on (the toolkit's loaders are built that way on purpose); silenced only
while :func:`execute` runs, never process-wide."""


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
    extra: dict = field(default_factory=dict)


@dataclass
class Result:
    """What :func:`execute` returns: the metrics summary (rank 0 of a run with ``metrics``; else None), the fitted
    module and its Trainer."""

    summary: dict | None
    module: Any
    trainer: Any


def default_module(config: TrainConfig, encoder: str, tasks: dict[str, TaskDef], encoder_model=None):
    """The :class:`~mtdnn.training.module.MultiTaskModule` of ``config`` (the factory of ``train``)."""
    from .module import MultiTaskModule

    return MultiTaskModule(encoder, {n: t.to_plain() for n, t in tasks.items()}, lr=config.lr,
                           weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio, dropout=config.dropout,
                           trust_remote_code=config.trust_remote_code, encoder_model=encoder_model)


def default_datamodule(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer):
    """The :class:`~mtdnn.training.datamodule.MultiTaskDataModule` of ``config`` (the factory of ``train``)."""
    from .datamodule import MultiTaskDataModule
    from .trainer import datamodule_for

    return datamodule_for(config, tasks, tokenizer, MultiTaskDataModule)


def check_positions(config: TrainConfig, tasks: dict[str, TaskDef], encoder_config) -> None:
    """The longest sequence (``max_length`` or a task's), padded to ``pad_to_multiple_of``, must fit the encoder's
    position embeddings (XLNet: -1, relative positions, no limit).

    Raises:
        ConfigError: naming the length, the flag and the encoder's limit.
    """
    limit = getattr(encoder_config, "max_position_embeddings", None)
    longest = config.max_length or max(t.max_length for t in tasks.values())
    if limit and limit > 0 and longest > limit:
        raise ConfigError(f"max length {longest} (--max-length or a task's max_length) exceeds the encoder's "
                          f"{limit} positions")
    padded = math.ceil(longest / config.pad_to_multiple_of) * config.pad_to_multiple_of
    if limit and limit > 0 and padded > limit:
        raise ConfigError(f"--pad-to-multiple-of {config.pad_to_multiple_of}: pads rows of up to {longest} tokens to "
                          f"{padded}, beyond the encoder's {limit} positions; choose a multiple of at most {limit}")


def check_unfinished(run_dir: Path, overwrite: bool, resume: bool, flag: str = "--output-dir") -> None:
    """One rule for every training command: an unfinished run directory (a run's ``config.yaml``, no complete
    ``metrics.json``) is continued with ``resume``, replaced with ``overwrite``, and otherwise refused; it is never
    emptied behind the user's back.

    Raises:
        CheckpointError: (exit code 2) the directory holds an interrupted run and neither flag is given.
    """
    from .runs import is_run_dir, read_metrics

    if resume or overwrite or not is_run_dir(run_dir) or read_metrics(run_dir) is not None:
        return
    raise CheckpointError(f"{flag} {run_dir}: holds an interrupted run (config.yaml, no metrics.json); pass --resume "
                          "to continue it (resume=True), --overwrite to replace it (overwrite=True), or choose "
                          "another directory")


def plan(config: TrainConfig, *, overwrite: bool = False, resume: bool = False, command: str = "train",
         tasks: dict[str, TaskDef] | None = None, encoder: str | None = None, source_encoder: str | None = None,
         encoder_model=None, tokenizer=None, heads_from: Path | None = None,
         module_factory: Callable[..., Any] | None = None, datamodule_factory: Callable[..., Any] | None = None,
         resolved: dict | None = None, outputs: Outputs = TRAINING_RUN, entries: frozenset[str] = RUN_ENTRIES,
         prepare: Callable[[Plan], None] | None = None, report: Callable[[dict, Path], Any] | None = None,
         check_data_files: bool = True, root_dir: Path | None = None,
         output_flag: str = "--output-dir") -> Plan:
    """Check a training run and build its parts; create nothing.

    Args:
        config: the run's settings (resolved here: tasks, data root, run directory).
        overwrite, resume: what to do with a run directory holding a run (:func:`check_unfinished`).
        command: ``resolved.command`` of ``config.yaml`` (``train``, ``distill``).
        tasks: the task definitions, when the path has resolved them itself (the student); else from
            ``config.task_defs`` and ``config.tasks``.
        encoder: the encoder the module starts from (default: ``config.encoder``, or ``config.init_from``'s);
            ``encoder_model``: that encoder already loaded (the student's truncated one), saved by ``prepare``;
            ``tokenizer``: its tokenizer, when the path has loaded it (default: ``encoder``'s).
        source_encoder: the pre-trained encoder recorded in the export (default: the one the run started from).
        heads_from: an export whose heads of matching tasks are copied into the module.
        module_factory: ``(config, encoder, tasks, encoder_model) -> LightningModule`` (default:
            :func:`default_module`). datamodule_factory: ``(config, tasks, tokenizer) -> LightningDataModule``
            (default: :func:`default_datamodule`).
        resolved: extra fields of ``config.yaml``'s ``resolved`` section.
        outputs, entries, prepare, report, root_dir: see :class:`Plan` and :class:`Outputs`.
        check_data_files: check the task files under ``config.data_dir`` (False: the data module brings its data).
        output_flag: how messages name the run directory (``--output-dir``, a spec's field).

    Returns:
        The :class:`Plan`.

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, flags, data, encoder or run directory.
    """
    import pytorch_lightning as pl

    from ..modeling.model import load_tokenizer
    from ..tasks.data import check_files, check_max_length, split_fingerprint
    from .export import resolve_export
    from .flags import check_loggers, check_trainer_flags
    from .resume import check_resumable
    from .runs import check_run_dir
    from .speed import check_speed_flags
    from .trainer import config_is_global_zero, copy_matching_heads, log_pooling, resolve_config

    check_bools("fit()", overwrite=overwrite, resume=resume)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")
    config, tasks = resolve_config(config, tasks, resolve_data=check_data_files)
    check_trainer_flags(config)
    check_loggers(config)
    check_speed_flags(buckets=config.length_buckets, compile_backend=config.compile, cuda_graphs=config.cuda_graphs,
                      accelerator=config.accelerator,
                      longest=config.max_length or max(t.max_length for t in tasks.values()),
                      pad_to_multiple_of=config.pad_to_multiple_of)
    run_dir = None
    if outputs.run_dir:
        run_dir = check_run_dir(config.output_dir, output_flag)
        if config_is_global_zero(config):  # the other ranks of a DDP run start after rank 0 wrote config.yaml
            check_unfinished(run_dir, overwrite, resume, output_flag)
    data_dir = Path(config.data_dir) if config.data_dir else None
    if check_data_files:
        for task in tasks.values():
            check_files(task, [s for s in ("train", "dev") if s in task.splits], data_dir)

    init_export = None
    if encoder is None:
        encoder = config.encoder
        if config.init_from:
            init_export = resolve_export(config.init_from)
            encoder = str(init_export / "encoder")
            if config.encoder != "packaged-minilm":
                log.warning("--encoder %s is ignored: --init-from %s gives the encoder", config.encoder,
                            config.init_from)
            heads_from = heads_from or init_export
    if tokenizer is None:
        tokenizer = load_tokenizer(encoder, config.trust_remote_code)
    for task in tasks.values():
        check_max_length(task, tokenizer, config.max_length,
                         "--max-length" if config.max_length else f"{config.task_defs}: task '{task.name}': max_length")
    pl.seed_everything(config.seed, workers=True, verbose=False)
    try:
        module = (module_factory or default_module)(config, encoder, tasks, encoder_model)
    except ConfigError as err:  # a task's head does not fit the encoder: name the task-definition file
        raise ConfigError(f"{config.task_defs}: {err}" if str(err).startswith("task '") else str(err)) from None
    tasks = log_pooling(tasks, module.model)
    check_positions(config, tasks, module.model.encoder.config)
    if heads_from is not None:
        copied = copy_matching_heads(module.model, heads_from, tasks)
        log.info("initialised from %s: encoder and heads of %s", heads_from, ", ".join(copied) or "no task")
    datamodule = (datamodule_factory or default_datamodule)(config, tasks, tokenizer)
    if source_encoder is None:
        source_encoder = config.encoder
        if init_export is not None:
            meta = read_json(init_export / "mtdnn_export.json", CheckpointError, "export metadata")
            source_encoder = meta.get("source_encoder", encoder) if isinstance(meta, dict) else encoder
    document, resume_from = None, None
    if outputs.run_dir:
        fingerprints = {n: {s: split_fingerprint(t, s, data_dir) for s in ("train", "dev") if s in t.splits}
                        for n, t in tasks.items()} if check_data_files else {}
        section = {"command": command, "encoder": encoder, "source_encoder": source_encoder,
                   "tasks": {n: t.to_plain() for n, t in tasks.items()}, "data_fingerprint": fingerprints,
                   **(resolved or {})}
        document = {**config.to_yaml_dict(), RESOLVED_KEY: section}
        resume_from = check_resumable(run_dir, document) if resume else None
    return Plan(config=config, tasks=tasks, tokenizer=tokenizer, module=module, datamodule=datamodule,
                source_encoder=source_encoder, document=document, run_dir=run_dir, overwrite=overwrite,
                resume_from=resume_from, outputs=outputs, entries=entries, prepare=prepare, report=report,
                root_dir=root_dir)


def build_trainer(plan: Plan, callbacks: list, resume_step: int | None = None):
    """The run's ``pl.Trainer``: the one place the toolkit constructs one.

    A run with a run directory gets its loggers under ``logs/``, the atomic checkpoint I/O and dev evaluation at
    epoch ends or every ``eval_every_n_steps``; a fine-tune without one (transfer) gets no loggers, checkpoints or
    dev evaluation.
    """
    import pytorch_lightning as pl

    from .flags import trainer_strategy
    from .logs import build_loggers
    from .runs import AtomicCheckpointIO

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
    if not plan.outputs.progress:
        kwargs.update(enable_progress_bar=False, enable_model_summary=False)
    return pl.Trainer(max_epochs=config.max_epochs, max_steps=config.max_steps or -1,
                      accumulate_grad_batches=config.accumulate_grad_batches, accelerator=config.accelerator,
                      devices=config.devices, num_nodes=config.num_nodes, strategy=trainer_strategy(config.strategy),
                      precision=config.precision, gradient_clip_val=config.gradient_clip or None,
                      deterministic=config.deterministic, use_distributed_sampler=False, callbacks=callbacks,
                      **kwargs)


def execute(plan: Plan, callbacks: list | None = None) -> Result:
    """Run a :class:`Plan`: tokenize, take the run directory, write ``config.yaml``, train with the one Trainer,
    export the best model and write ``schedule.json`` and (last) ``metrics.json``, as ``plan.outputs`` asks.

    Args:
        callbacks: more Lightning callbacks (benchmarks' timers).

    Returns:
        The :class:`Result`.

    Raises:
        Interrupted: Ctrl-C (130) or SIGTERM (143), after ``last.ckpt`` is saved where possible.
        Diverged: a non-finite loss, gradient norm or dev average (exit code 3).
        RankLost: another rank of a distributed run died (exit code 1).
        ConfigError: resuming with another world size than the checkpoint's.
    """
    from .flags import check_eval_interval
    from .runs import CONFIG_FILE, lock_run_dir, prepare_run_dir
    from .speed import compile_encoder, set_sdpa_backend
    from .trainer import config_is_global_zero

    config, run_dir = plan.config, plan.run_dir
    lock = None
    if plan.outputs.run_dir and config_is_global_zero(config):
        plan.datamodule.prepare_data()  # parse and tokenize now, so data errors come before the run directory
        check_eval_interval(config, plan.datamodule)
        # one writer per run directory: a second training started on it is refused here, having written nothing
        lock = lock_run_dir(run_dir, "--output-dir")
    try:
        if lock is not None:
            if plan.resume_from is None:
                prepare_run_dir(run_dir, plan.overwrite, entries=plan.entries)
                if plan.prepare is not None:
                    plan.prepare(plan)
            # on resume, only settings that do not change training may differ (the data's location): recorded anew
            write_yaml_atomic(run_dir / CONFIG_FILE, plan.document)
        set_sdpa_backend(config.sdpa_backend)
        if config.compile:
            # Module.compile works in place: no OptimizedModule wrapper, so no "_orig_mod." in checkpoint keys.
            compile_encoder(plan.module.model.encoder, config.compile, config.length_buckets, config.cuda_graphs)
            plan.datamodule.mark_shapes = "buckets" if config.length_buckets else "dynamic"
        with warnings.catch_warnings():
            for pattern in QUIET_WARNINGS:
                warnings.filterwarnings("ignore", pattern)
            result = _fit(plan, list(callbacks or []))
        if result.summary is not None and plan.report is not None:
            plan.report(result.summary, run_dir)
    finally:
        if lock is not None:
            lock.release()
    return result


def _fit(plan: Plan, extra_callbacks: list) -> Result:
    """Train ``plan.module`` with the run's Trainer; on rank 0 export and write the summaries (see :func:`execute`)."""
    from .callbacks import EvaluateAtMaxSteps, NonFiniteGuard, ResumeRNG

    if not plan.outputs.run_dir:  # a fine-tune: no checkpoints, no dev evaluation, Lightning's own signal handling
        trainer = build_trainer(plan, [NonFiniteGuard(), *extra_callbacks])
        trainer.fit(plan.module, datamodule=plan.datamodule)
        return Result(None, plan.module, trainer)

    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    from .callbacks import TrainingDiverged
    from .flags import planned_steps
    from .logs import PrintRunSummary
    from .resume import check_world_size
    from .rng import RANK_RNG_FILE
    from .runs import CHECKPOINT_DIR, load_checkpoint_file
    from .stopping import SaveLastCheckpoint, graceful_stop_connector, install_patient_process_observer, \
        is_peer_failure

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
    from .export import export_model
    from .runs import EXPORT_DIR, METRICS_FILE, SCHEDULE_FILE, check_finite_run, load_checkpoint_file
    from .summaries import metrics_summary, schedule_summary

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
        export_model(module.model, plan.tokenizer, plan.tasks, run_dir / EXPORT_DIR, source_encoder=plan.source_encoder)
    if plan.outputs.schedule:
        write_json_atomic(run_dir / SCHEDULE_FILE, schedule_summary(module.step_log, config.schedule,
                                                                    config.batch_size, config.accumulate_grad_batches))
    summary = metrics_summary(module.dev_history, best_path, run_dir, stopped_early)
    if plan.outputs.metrics:
        write_json_atomic(run_dir / METRICS_FILE, summary)
    return summary
