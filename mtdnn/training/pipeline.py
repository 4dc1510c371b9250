"""The one training pipeline: a run is *planned*, then *executed*.

Every training path goes through it and supplies only what differs: ``python -m mtdnn.train`` and each teacher
member (:func:`mtdnn.training.trainer.fit`), the student (:mod:`mtdnn.distillation.student`), each few-shot transfer
fine-tune (:mod:`mtdnn.evaluation.transfer.finetune`) and the diagnostics' partial-input runs (through ``fit``)::

    plan = pipeline.plan(config, module_factory=..., datamodule_factory=..., resolved={...})  # creates nothing
    result = pipeline.execute(plan)                                  # the run's one pl.Trainer, fit, export, ...

:func:`plan` checks everything that can be wrong (settings, Lightning flags without building a Trainer, speed
flags, loggers, the run directory, data files, the encoder's lengths and positions, resume) and builds the
tokenizer, the module, the data module and the resolved ``config.yaml`` document. :func:`execute` tokenizes,
takes the run directory, writes ``config.yaml``, builds the one ``pl.Trainer``
(:func:`mtdnn.training.fitting.build_trainer`, the only place one is constructed), fits, and writes what the path's :class:`Outputs` ask for: the export of the best model,
``schedule.json`` and, last, ``metrics.json``.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl

from ..errors import CheckpointError, ConfigError
from ..fileio import read_json, write_yaml_atomic
from ..modeling.model import load_tokenizer
from ..tasks.data import split_fingerprint
from ..tasks.taskdef import TaskDef
from ..tasks.tokenized import check_max_length
from .config import RESOLVED_KEY, TrainConfig
from .datamodule import MultiTaskDataModule
from .export import resolve_export
from .fitting import fit_plan
from .flags import check_eval_interval
from .module import MultiTaskModule
from .plans import FINE_TUNE_ONLY, TRAINING_RUN, Outputs, Plan, Result  # noqa: F401 - FINE_TUNE_ONLY: for callers
from .progress import quietly
from .resolve import check_run, config_is_global_zero, copy_matching_heads, datamodule_for, log_pooling
from .resume import check_resumable
from .runs import CONFIG_FILE, RUN_ENTRIES, lock_run_dir, prepare_run_dir
from .speed import check_speed_flags, compile_encoder, set_sdpa_backend

log = logging.getLogger("mtdnn.train")

QUIET_WARNINGS = (".*does not have many workers.*", ".*predefined batch sampler.*", ".*LeafSpec.*")
"""Lightning warnings a user cannot act on (the toolkit's loaders are built that way on purpose); silenced only
while :func:`execute` runs, never process-wide."""


def default_module(config: TrainConfig, encoder: str, tasks: dict[str, TaskDef], encoder_model=None):
    """The :class:`~mtdnn.training.module.MultiTaskModule` of ``config`` (the factory of ``train``)."""

    return MultiTaskModule(encoder, {n: t.to_plain() for n, t in tasks.items()}, lr=config.lr,
                           weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio, dropout=config.dropout,
                           trust_remote_code=config.trust_remote_code, encoder_model=encoder_model)


def default_datamodule(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer):
    """The :class:`~mtdnn.training.datamodule.MultiTaskDataModule` of ``config`` (the factory of ``train``)."""

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



@quietly
def plan(config: TrainConfig, *, overwrite: bool = False, resume: bool = False, command: str = "train",
         tasks: dict[str, TaskDef] | None = None, encoder: str | None = None, source_encoder: str | None = None,
         encoder_model=None, tokenizer=None, heads_from: Path | None = None,
         module_factory: Callable[..., Any] | None = None, datamodule_factory: Callable[..., Any] | None = None,
         resolved: dict | None = None, outputs: Outputs = TRAINING_RUN, entries: frozenset[str] = RUN_ENTRIES,
         prepare: Callable[[Plan], None] | None = None, report: Callable[[dict, Path], Any] | None = None,
         check_data_files: bool = True, root_dir: Path | None = None,
         output_flag: str = "--output-dir") -> Plan:
    """Check a training run and build its parts; create nothing. Meanwhile (and while :func:`execute` runs)
    Lightning's messages a user cannot act on are dropped, and the Hugging Face progress bars are off when the
    output is a log file (:func:`mtdnn.training.progress.quiet_libraries`).

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

    config, tasks, run_dir = check_run(config, overwrite=overwrite, resume=resume, tasks=tasks,
                                       check_data_files=check_data_files, run_dir=outputs.run_dir,
                                       output_flag=output_flag)
    check_speed_flags(buckets=config.length_buckets, compile_backend=config.compile, cuda_graphs=config.cuda_graphs,
                      accelerator=config.accelerator,
                      longest=config.max_length or max(t.max_length for t in tasks.values()),
                      pad_to_multiple_of=config.pad_to_multiple_of)
    data_dir = Path(config.data_dir) if config.data_dir else None

    init_export, init_source = None, None
    if encoder is None:
        encoder = config.encoder
        if config.init_from:
            init_export = resolve_export(config.init_from)
            encoder = str(init_export / "encoder")
            meta = read_json(init_export / "mtdnn_export.json", CheckpointError, "export metadata")
            init_source = meta.get("source_encoder", encoder) if isinstance(meta, dict) else encoder
            # a teacher member names the run's own pre-trained encoder: nothing is ignored then
            if config.encoder not in ("packaged-minilm", init_source):
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
        source_encoder = config.encoder if init_export is None else init_source
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


@quietly
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
            result = fit_plan(plan, list(callbacks or []))
        if result.summary is not None and plan.report is not None:
            plan.report(result.summary, run_dir)
    finally:
        if lock is not None:
            lock.release()
    return result
