"""``python -m mtdnn.train TASK_DEFS``: multi-task training of one shared encoder (MT-DNN Algorithm 1).

Example::

    python -m mtdnn.train task_defs/glue.yaml --data-dir ../shared/data --tasks rte,mrpc,stsb,cola

writes a run directory (see :mod:`mtdnn.training.runs`) with the resolved config, checkpoints, logs, ``schedule.json``,
the export of the best epoch's model and, last, ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import warnings
from collections import Counter
from pathlib import Path

from ..errors import CheckpointError, ConfigError, HelpFormatter, run_cli
from ..fileio import (append_lines, prepare_output_dir, read_json, read_safetensors, read_yaml, write_json_atomic,
                      write_yaml_atomic)
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks

log = logging.getLogger("mtdnn.train")


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text})")
    return value


def float_in(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = True):
    """A flag type: a finite float in the interval from ``low`` to ``high`` (open or closed at each end).

    ``inf``, ``nan`` and values outside the interval are refused by argparse (exit code 2, naming the flag).
    """
    upper = "inf" if high == math.inf else f"{high:g}"
    shown = f"{'(' if low_open else '['}{low:g}, {upper}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number (got {text!r})") from None
        inside = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not math.isfinite(value) or not inside:
            raise argparse.ArgumentTypeError(f"must be a finite number in {shown} (got {text})")
        return value

    parse.__name__ = f"float in {shown}"
    return parse


positive_float = float_in(0, low_open=True)


def max_length_int(text: str) -> int:
    """A flag type for ``--max-length``: the range a task definition's ``max_length`` allows."""
    from ..tasks.taskdef import MAX_LENGTH_RANGE

    low, high = MAX_LENGTH_RANGE
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer (got {text!r})") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], as a task's max_length (got {text}); "
                                         "a pair needs room for its special tokens and some of each text")
    return value


def task_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one task name, comma-separated")
    return names


def add_trainer_args(parser: argparse.ArgumentParser) -> None:
    """Lightning Trainer options shared by the training commands (engineering, not research)."""
    g = parser.add_argument_group("Lightning trainer")
    g.add_argument("--accelerator", default="auto", help="cpu, gpu, cuda, mps or auto")
    g.add_argument("--devices", default="auto", help="number of devices, a list like 0,1, or auto")
    g.add_argument("--strategy", default="auto",
                   help="auto, ddp (mapped to DDP with find_unused_parameters=True: each step leaves other "
                        "tasks' heads unused), ddp_spawn, ...")
    g.add_argument("--num-nodes", type=positive_int, default=1, help="nodes for multi-node DDP")
    g.add_argument("--precision", default="32-true",
                   help="32-true (default), bf16-mixed or 16-mixed (GPU), bf16-true")
    g.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    g.add_argument("--keep-last-checkpoint", action="store_true",
                   help="keep checkpoints/last.ckpt (weights and optimizer state, for --resume) when the run "
                        "completes; by default it is removed, and best.ckpt holds the weights only")
    g.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                   help="torch.compile the encoder, in place so checkpoints keep their parameter names "
                        "(backend default: inductor)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mtdnn.train", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("task_defs", help="task-definition YAML (e.g. task_defs/glue.yaml)")
    p.add_argument("--tasks", type=task_list, default=None,
                   help="comma-separated tasks to train (default: every task with a train split)")
    p.add_argument("--data-dir", default=None,
                   help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--encoder", default="packaged-minilm",
                   help="Hugging Face encoder name or path; packaged-minilm is the embedded all-MiniLM-L6-v2")
    p.add_argument("--init-from", default=None,
                   help="start from an earlier run's (or export's) encoder and the heads of matching tasks")
    p.add_argument("--output-dir", default=None,
                   help="run directory (default: runs/<task-defs>-<tasks>-seed<seed>)")
    p.add_argument("--overwrite", action="store_true", help="replace a run directory that holds a complete run")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --output-dir from checkpoints/last.ckpt (same flags)")
    p.add_argument("--checkpoint-every-n-steps", type=positive_int, default=None, metavar="N",
                   help="also save checkpoints/last.ckpt every N optimizer steps (always at epoch ends and on SIGTERM)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-epochs", type=positive_int, default=3, help="training epochs")
    g.add_argument("--batch-size", type=positive_int, default=32, help="global batch size (all ranks together)")
    g.add_argument("--eval-batch-size", type=positive_int, default=64, help="dev batch size per rank")
    g.add_argument("--lr", type=float_in(0, 1, low_open=True, high_open=False), default=5e-5,
                   help="peak learning rate (AdamW), in (0, 1]")
    g.add_argument("--weight-decay", type=float_in(0), default=0.01,
                   help="AdamW weight decay (not on biases, LayerNorm)")
    g.add_argument("--warmup-ratio", type=float_in(0, 1), default=0.1, help="fraction of steps with linear warm-up")
    g.add_argument("--gradient-clip", type=float_in(0), default=1.0, help="max gradient norm (0: none)")
    g.add_argument("--max-length", type=max_length_int, default=None,
                   help="override every task's max sequence length (default: each task's, 128 in glue.yaml)")
    g.add_argument("--schedule", choices=["proportional", "temperature", "uniform"], default="proportional",
                   help="task schedule: proportional = MT-DNN Algorithm 1")
    g.add_argument("--temperature", type=positive_float, default=2.0,
                   help="T of temperature sampling, p_t ~ n_t^(1/T) (only with --schedule temperature)")
    g.add_argument("--seed", type=int, default=42, help="seed of initialisation, dropout and the schedule")
    g.add_argument("--limit-train-examples", type=positive_int, default=None, metavar="N",
                   help="use the first N rows of each task's train split")
    g.add_argument("--limit-eval-examples", type=positive_int, default=None, metavar="N",
                   help="score the first N rows of each task's dev split (a quick run; its default run directory "
                        "is marked -limited)")
    g.add_argument("--pad-to-multiple-of", type=positive_int, default=1, help="pad lengths to a multiple (8 on GPU)")
    g.add_argument("--dropout", type=float_in(0, 1), default=None,
                   help="override every dropout probability, encoder and heads (default: the encoder's and tasks')")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow encoders with custom code from the hub (off by default)")
    add_trainer_args(p)
    add_speed_args(p)
    return p


def add_speed_args(parser: argparse.ArgumentParser) -> None:
    """Speed flags of training (see :mod:`mtdnn.training.speed`); all off by default."""
    from .speed import SDPA_BACKENDS, parse_buckets

    def buckets(text: str) -> list[int]:
        try:
            return parse_buckets(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    g = parser.add_argument_group("speed (see the README's GPU section)")
    g.add_argument("--length-buckets", type=buckets, default=None, metavar="L1,L2,...",
                   help="pad every batch to the shortest of these lengths that holds it: with --compile, one graph "
                        "per bucket (e.g. 32,64,96,128)")
    g.add_argument("--cuda-graphs", action="store_true",
                   help="record CUDA graphs per bucket (GPU; needs --compile inductor and --length-buckets)")
    g.add_argument("--sdpa-backend", choices=SDPA_BACKENDS, default="auto",
                   help="attention kernels: efficient = flash/memory-efficient, never cuDNN (no plan per shape)")


def default_output_dir(task_defs: str, tasks: list[str], seed: int, limit_train_examples: int | None = None,
                       limit_eval_examples: int | None = None) -> Path:
    """``runs/<yaml stem>-<task>-<task>...-seed<seed>``: a pure function of the flags (DDP ranks agree).

    A limited run (``--limit-train-examples``/``--limit-eval-examples``) gets its own directory, suffixed
    ``-limited-train<N>-dev<M>``, so that it never takes the place of a full run that teachers build from.
    """
    limits = "".join(f"-{what}{n}" for what, n in (("train", limit_train_examples), ("dev", limit_eval_examples)) if n)
    return Path("runs") / f"{Path(task_defs).stem}-{'-'.join(tasks)}-seed{seed}{'-limited' + limits if limits else ''}"


def run_limits(run: str | Path) -> dict[str, int]:
    """The ``--limit-*-examples`` a training run was made with (its ``config.yaml``); empty for a full run or when
    the run has no configuration (an export directory)."""
    from .runs import CONFIG_FILE

    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        return {}
    config = read_yaml(path, CheckpointError, "run configuration")
    args = config.get("args") if isinstance(config, dict) else None
    if not isinstance(args, dict):
        return {}
    return {k: args[k] for k in ("limit_train_examples", "limit_eval_examples") if args.get(k)}


def check_trainer_flags(flags: argparse.Namespace) -> None:
    """Check the Lightning flags of a training command (see :func:`check_lightning_flags`) and ``--num-workers``.

    Raises:
        ConfigError: a negative --num-workers, or Lightning rejects the flags.
    """
    if getattr(flags, "num_workers", 0) < 0:
        raise ConfigError(f"--num-workers: must not be negative (got {flags.num_workers})")
    check_lightning_flags(accelerator=flags.accelerator, devices=flags.devices, strategy=flags.strategy,
                          precision=flags.precision, num_nodes=flags.num_nodes)


PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")


def _build_trainer(**flags) -> None:
    import pytorch_lightning as pl

    kwargs = {**flags, "strategy": trainer_strategy(flags.get("strategy", "auto"))}
    pl.Trainer(**kwargs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False)


def valid_precisions(**flags) -> list[str]:
    """The :data:`PRECISIONS` that Lightning accepts together with the other ``flags`` (accelerator, devices...)."""
    valid = []
    logging.disable(logging.INFO)  # Lightning announces each Trainer it builds
    try:
        with warnings.catch_warnings():  # and warns of the precisions it substitutes
            warnings.simplefilter("ignore")
            for precision in PRECISIONS:
                try:
                    _build_trainer(**{**flags, "precision": precision})
                    valid.append(precision)
                except Exception:  # noqa: BLE001 - any refusal means "not valid here"
                    pass
    finally:
        logging.disable(logging.NOTSET)
    return valid


def check_lightning_flags(**flags) -> None:
    """Build (and drop) a Trainer from Lightning flags, so that a bad one fails before any file is written.

    Args:
        flags: Trainer arguments named as the CLI flags (``accelerator``, ``devices``, ``strategy``, ``precision``,
            ``num_nodes``); those given are quoted in the error.

    Raises:
        ConfigError: Lightning rejects the combination; when the precision is what it refuses, the message
            names the precisions it accepts with the other flags.
    """
    try:
        _build_trainer(**flags)
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
        from pytorch_lightning.strategies import DDPStrategy

        return DDPStrategy(find_unused_parameters=True)
    return name


def is_global_zero() -> bool:
    """Whether this process is rank 0 (Lightning re-launches the command for the other ranks)."""
    return all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def schedule_summary(step_log: list[tuple[int, str]], schedule: str, batch_size: int) -> dict:
    """``schedule.json``: the task of every optimizer step per epoch and the realised batch counts."""
    epochs = sorted({e for e, _ in step_log})
    per_epoch = []
    for epoch in epochs:
        steps = [t for e, t in step_log if e == epoch]
        per_epoch.append({"epoch": epoch + 1, "steps": steps, "batches_per_task": dict(Counter(steps))})
    return {"schedule": schedule, "global_batch_size": batch_size, "steps": len(step_log),
            "batches_per_task": dict(Counter(t for _, t in step_log)), "epochs": per_epoch}


def metrics_summary(history: list[dict], best_checkpoint: Path, run_dir: Path) -> dict:
    """``metrics.json``: dev scores per epoch and the best epoch (highest average, first on ties)."""
    best = max(history, key=lambda h: h["average"])  # max keeps the first of equal values
    return {"status": "complete", "epochs": history,
            "best": {"epoch": best["epoch"],
                     "checkpoint": str(best_checkpoint.resolve().relative_to(run_dir.resolve())),
                     "tasks": best["tasks"], "average": best["average"]}}


def copy_matching_heads(model, export_dir: Path, tasks: dict[str, TaskDef]) -> list[str]:
    """Load the heads of ``export_dir`` whose task name, type and output size match; return their names."""
    from .export import load_export_tasks

    saved_tasks = load_export_tasks(export_dir)
    state = read_safetensors(export_dir / "heads.safetensors")
    copied = []
    for name, task in tasks.items():
        old = saved_tasks.get(name)
        if old is None or old.type != task.type or old.head_type != task.head_type or \
                old.num_outputs != task.num_outputs or old.labels != task.labels:
            continue
        model.heads[name].load_state_dict({k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")})
        copied.append(name)
    return copied


def log_pooling(asked: dict[str, TaskDef], model) -> dict[str, TaskDef]:
    """Log each task's pooling and whether the toolkit chose it; return the model's tasks (pooling resolved).

    ``asked``: the task definitions as written; ``model``: the :class:`~mtdnn.modeling.model.MultiTaskModel` built
    from them, whose ``tasks`` carry the pooling chosen for the encoder (recorded in ``config.yaml`` and the export).
    """
    family = getattr(model.encoder.config, "model_type", type(model.encoder).__name__)
    for name, task in model.tasks.items():
        how = f"chosen for the {family} encoder" if asked[name].head.pooling is None else "set by the task"
        log.info("task '%s': head.pooling %s (%s)", name, task.head.pooling, how)
    return dict(model.tasks)


FAULT_ENV = "MTDNN_FAULT_AT_STEP"

DIVERGED_EXIT_CODE = 3  # training stopped on a non-finite loss or gradient norm (2 is bad input)


TRACE_ENV = "MTDNN_TRACE_DIR"


def engineering_callbacks(last_checkpoint: Path, every_n_steps: int | None = None) -> list:
    """Callbacks for faults and resumption (engineering, not research).

    - Every ``every_n_steps`` optimizer steps, and on SIGTERM (a scheduler pre-empting the job), save
      ``last_checkpoint`` at the end of the step (atomically); after SIGTERM Lightning then stops the run.
    - With ``$MTDNN_FAULT_AT_STEP=N``, send this process SIGTERM once N optimizer steps are done: tests of
      interruption and exact resume use a fixed step, never a timer.
    - With ``$MTDNN_TRACE_DIR``, every rank writes ``trace-rank<r>.jsonl``: per step the task and the real
      example rows it trained on (for DDP tests).
    """
    import pytorch_lightning as pl

    class SaveLastCheckpoint(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            fault = os.environ.get(FAULT_ENV)
            if fault and trainer.global_step == int(fault):
                os.kill(os.getpid(), signal.SIGTERM)
            if trainer.received_sigterm or (every_n_steps and trainer.global_step % every_n_steps == 0):
                trainer.save_checkpoint(last_checkpoint)

    class TraceSteps(pl.Callback):
        def __init__(self, directory: Path):
            self.directory, self.rows = directory, []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            real = batch["idx"][batch["weight"] > 0].tolist()
            self.rows.append({"epoch": trainer.current_epoch, "step": trainer.global_step, "task": batch["task"],
                              "rows": real})

        def on_train_end(self, trainer, pl_module):
            append_lines(self.directory / f"trace-rank{trainer.global_rank}.jsonl",
                         [json.dumps(r) + "\n" for r in self.rows])

    callbacks: list = [SaveLastCheckpoint()]
    if os.environ.get(TRACE_ENV):
        callbacks.append(TraceSteps(Path(os.environ[TRACE_ENV])))
    return callbacks


RESUME_MAY_DIFFER = frozenset({
    "args.resume", "args.overwrite", "args.output_dir", "args.checkpoint_every_n_steps", "args.num_workers",
    "args.accelerator", "args.compile", "args.keep_last_checkpoint",
    # where the data and task definitions lie may change; their content is compared (data_fingerprint, tasks)
    "args.data_dir", "data_dir", "args.task_defs",
})
"""Settings of ``config.yaml`` that do not change what is trained; every other one must match on ``--resume``."""


def check_resumable(run_dir: Path, config: dict) -> Path:
    """The checkpoint to resume from, after checking that the run is incomplete and that its ``config.yaml``
    matches ``config`` (the one this command would write) in every setting that changes training.

    Every field is compared, whatever ``config.yaml`` holds (flags, task definitions, encoder, the data's
    fingerprint), except :data:`RESUME_MAY_DIFFER`; all differences are named at once.

    Raises:
        CheckpointError: no such run, the run is complete, no last.ckpt, or the checkpoint or configuration is
            damaged.
        ConfigError: a setting or the data differs from the interrupted run's.
    """
    from .runs import CHECKPOINT_DIR, CONFIG_FILE, config_differences, load_checkpoint_file, read_metrics

    if read_metrics(run_dir) is not None:
        raise CheckpointError(f"{run_dir}: the run is complete; nothing to resume")
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    config_path = run_dir / CONFIG_FILE
    if not last.is_file() or not config_path.is_file():
        raise CheckpointError(f"{run_dir}: no interrupted run to resume (need {CONFIG_FILE} and {last.name})")
    load_checkpoint_file(last)  # a truncated or damaged checkpoint is reported here, before anything starts
    saved = read_yaml(config_path, CheckpointError, "run configuration")
    if not isinstance(saved, dict) or saved.get("command") != config.get("command"):
        raise CheckpointError(f"{config_path}: not the configuration of a '{config.get('command')}' run")
    differences = [d for d in config_differences(saved, config) if d[0] not in RESUME_MAY_DIFFER]
    if differences:
        shown = "; ".join(f"{_setting_name(key)}: now {now!r}, the interrupted run used {was!r}"
                          for key, was, now in differences[:8])
        more = f" (and {len(differences) - 8} more)" if len(differences) > 8 else ""
        raise ConfigError(f"--resume: {config_path}: the interrupted run was trained with other settings: "
                          f"{shown}{more}. Resume with the same flags and data, or start a new run")
    return last


def _setting_name(key: str) -> str:
    """``args.lr`` -> ``--lr``; other keys of config.yaml as they are (``data_fingerprint.rte.train``)."""
    return "--" + key[len("args."):].replace("_", "-") if key.startswith("args.") else key


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*predefined batch sampler.*")

    import pytorch_lightning as pl

    from ..tasks.data import check_files, check_max_length, resolve_data_dir, split_fingerprint
    from .export import resolve_export
    from .lightning import MultiTaskDataModule, MultiTaskModule
    from ..modeling.model import load_tokenizer
    from .runs import CONFIG_FILE, prepare_run_dir
    from .speed import check_speed_flags, compile_encoder, set_sdpa_backend

    # 1. Validate everything that can be wrong before creating anything.
    all_tasks = load_task_defs(args.task_defs)
    if args.tasks is None:  # every task that can be trained; the others are evaluation-only
        untrainable = [n for n, t in all_tasks.items() if "train" not in t.splits]
        if untrainable:
            log.info("%s: training every task with a train split; %s have none (evaluation only)",
                     args.task_defs, ", ".join(untrainable))
        args.tasks = [n for n in all_tasks if n not in untrainable] or list(all_tasks)
    tasks = select_tasks(all_tasks, args.tasks, args.task_defs)
    for name, task in tasks.items():
        if "train" not in task.splits:
            raise ConfigError(f"{args.task_defs}: task '{name}' has no train split; it can be evaluated, not trained")
    if not any("dev" in t.splits and t.task_type.selected for t in tasks.values()):
        raise ConfigError(f"{args.task_defs}: none of the tasks {', '.join(tasks)} has a dev split to select on "
                          "(mlm tasks are scored on dev but never select the best epoch)")
    if not 0 <= args.warmup_ratio < 1:
        raise ConfigError(f"--warmup-ratio: must be in [0, 1) (got {args.warmup_ratio})")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise ConfigError(f"--dropout: must be in [0, 1) (got {args.dropout})")
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")
    if args.weight_decay < 0 or args.gradient_clip < 0:
        raise ConfigError("--weight-decay and --gradient-clip must not be negative")
    check_trainer_flags(args)
    check_speed_flags(buckets=args.length_buckets, compile_backend=args.compile, cuda_graphs=args.cuda_graphs,
                      accelerator=args.accelerator, longest=args.max_length or max(t.max_length for t in tasks.values()),
                      pad_to_multiple_of=args.pad_to_multiple_of)
    run_dir = Path(args.output_dir) if args.output_dir else default_output_dir(
        args.task_defs, list(tasks), args.seed, args.limit_train_examples, args.limit_eval_examples)
    prepare_output_dir(run_dir, "--output-dir")
    data_dir = resolve_data_dir(args.data_dir)
    for task in tasks.values():
        check_files(task, [s for s in ("train", "dev") if s in task.splits], data_dir)

    encoder = args.encoder
    init_export = None
    if args.init_from:
        init_export = resolve_export(args.init_from)
        encoder = str(init_export / "encoder")
        if args.encoder != "packaged-minilm":
            log.warning("--encoder %s is ignored: --init-from %s gives the encoder", args.encoder, args.init_from)
    tokenizer = load_tokenizer(encoder, args.trust_remote_code)
    for task in tasks.values():
        check_max_length(task, tokenizer, args.max_length,
                         "--max-length" if args.max_length else f"{args.task_defs}: task '{task.name}': max_length")
    pl.seed_everything(args.seed, workers=True, verbose=False)
    try:
        module = MultiTaskModule(encoder, {n: t.to_plain() for n, t in tasks.items()}, lr=args.lr,
                                 weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio, dropout=args.dropout,
                                 trust_remote_code=args.trust_remote_code)
    except ConfigError as err:  # a task's head does not fit the encoder: name the task-definition file
        raise ConfigError(f"{args.task_defs}: {err}" if str(err).startswith("task '") else str(err)) from None
    tasks = log_pooling(tasks, module.model)
    limit = getattr(module.model.encoder.config, "max_position_embeddings", None)
    longest = args.max_length or max(t.max_length for t in tasks.values())
    if limit and limit > 0 and longest > limit:  # XLNet: -1 (relative positions, no limit)
        raise ConfigError(f"max length {longest} (--max-length or a task's max_length) exceeds the encoder's "
                          f"{limit} positions")
    if init_export is not None:
        copied = copy_matching_heads(module.model, init_export, tasks)
        log.info("initialised from %s: encoder and heads of %s", init_export, ", ".join(copied) or "no task")
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=args.batch_size,
                                     eval_batch_size=args.eval_batch_size, schedule=args.schedule,
                                     temperature=args.temperature if args.schedule == "temperature" else 1.0,
                                     seed=args.seed, limit_train_examples=args.limit_train_examples,
                                     max_length=args.max_length, pad_to_multiple_of=args.pad_to_multiple_of,
                                     num_workers=args.num_workers, length_buckets=args.length_buckets,
                                     limit_eval_examples=args.limit_eval_examples)
    config = {"command": "train", "args": {k: v for k, v in vars(args).items()},
              "data_dir": str(data_dir), "encoder": encoder,
              "tasks": {n: t.to_plain() for n, t in tasks.items()},
              "data_fingerprint": {n: {s: split_fingerprint(t, s, data_dir) for s in ("train", "dev") if s in t.splits}
                                   for n, t in tasks.items()}}
    resume_from = check_resumable(run_dir, config) if args.resume else None
    if is_global_zero():
        datamodule.prepare_data()  # parse and tokenize now, so data errors come before the run directory
        if resume_from is None:
            prepare_run_dir(run_dir, args.overwrite)
            from ..tasks.token import article_lists

            carves = article_lists(tasks, data_dir)
            if carves:  # the articles of each side of a carve by article (SQuAD), for the record
                write_json_atomic(run_dir / "carves.json", carves)
        # on resume, only settings that do not change training may differ (the data's location): recorded anew
        write_yaml_atomic(run_dir / CONFIG_FILE, config)
    set_sdpa_backend(args.sdpa_backend)
    if args.compile:
        # Module.compile works in place: no OptimizedModule wrapper, so no "_orig_mod." in checkpoint keys.
        compile_encoder(module.model.encoder, args.compile, args.length_buckets, args.cuda_graphs)
        datamodule.mark_shapes = "buckets" if args.length_buckets else "dynamic"

    # 2. Train, export the best epoch, write schedule.json and (last) metrics.json.
    source_encoder = args.encoder
    if init_export is not None:
        meta = read_json(init_export / "mtdnn_export.json", CheckpointError, "export metadata")
        source_encoder = meta.get("source_encoder", encoder) if isinstance(meta, dict) else encoder
    code, summary = fit_and_export(module, datamodule, tasks, tokenizer, run_dir, args, max_epochs=args.max_epochs,
                                   gradient_clip=args.gradient_clip, schedule=args.schedule,
                                   batch_size=args.batch_size, source_encoder=source_encoder,
                                   resume_from=resume_from, checkpoint_every_n_steps=args.checkpoint_every_n_steps)
    if summary is not None:
        best = summary["best"]
        print(f"best epoch {best['epoch']}: average {best['average']:.4f} "
              + " ".join(f"{t}={v[tasks[t].metric_names[0]]:.4f}" for t, v in best["tasks"].items()))
        print(f"run directory: {run_dir}")
    return code


def fit_and_export(module, datamodule, tasks: dict[str, TaskDef], tokenizer, run_dir: Path,
                   trainer_flags: argparse.Namespace, *, max_epochs: int, gradient_clip: float, schedule: str,
                   batch_size: int, source_encoder: str, resume_from: Path | None = None,
                   checkpoint_every_n_steps: int | None = None) -> tuple[int, dict | None]:
    """The toolkit's Trainer set-up, shared by every training command (train, distill's student, ...).

    Trains ``module`` on ``datamodule``; keeps ``best.ckpt`` (dev average, first of equal scores) and
    ``last.ckpt`` (every epoch, every N steps, on SIGTERM); asserts that exactly the planned number of optimizer
    steps ran; then on rank 0 exports the best epoch's model and writes ``schedule.json`` and, last,
    ``metrics.json``. ``trainer_flags`` carries the Lightning options of :func:`add_trainer_args`.

    Returns:
        ``(exit code, metrics summary)``: 130/143 and None when interrupted (Ctrl-C/SIGTERM), 3
        (``DIVERGED_EXIT_CODE``) and None when a non-finite loss or gradient norm stopped training (the last
        checkpoint saved before it is kept), 0 and None on ranks other than 0.
    """
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from .export import export_model
    from .lightning import TrainingDiverged
    from .logs import ResumableCSVLogger, summary_callback
    from .runs import (AtomicCheckpointIO, CHECKPOINT_DIR, EXPORT_DIR, METRICS_FILE, SCHEDULE_FILE,
                       check_finite_run, load_checkpoint_file, write_json_atomic)

    # best.ckpt by the dev average; last.ckpt at every epoch end, listed after it so that it holds the updated
    # best-score state (Lightning 2.6's save_last skips epochs that are not a new best).
    checkpoint = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="best", monitor="dev/average",
                                 mode="max", save_top_k=1, auto_insert_metric_name=False, enable_version_counter=False,
                                 save_weights_only=True)  # weights (and hyper-parameters) only: a third of the size
    last = ModelCheckpoint(dirpath=run_dir / CHECKPOINT_DIR, filename="last", monitor=None, save_top_k=1,
                           every_n_epochs=1, auto_insert_metric_name=False, enable_version_counter=False)
    callbacks = [checkpoint, last, *engineering_callbacks(run_dir / CHECKPOINT_DIR / "last.ckpt",
                                                          checkpoint_every_n_steps), summary_callback()]
    # One continuous log: a resumed run continues logs/metrics.csv (rows after its checkpoint are logged again)
    # and writes its TensorBoard events beside the first part's, so TensorBoard shows one run.
    resume_step = load_checkpoint_file(resume_from)["global_step"] if resume_from else None
    loggers = [ResumableCSVLogger(run_dir, name="logs", resume_step=resume_step)]
    try:
        from pytorch_lightning.loggers import TensorBoardLogger

        import tensorboard  # noqa: F401

        loggers.append(TensorBoardLogger(run_dir, name="logs", version="tensorboard"))
    except ImportError:
        pass
    flags = trainer_flags
    trainer = pl.Trainer(max_epochs=max_epochs, accelerator=flags.accelerator, devices=flags.devices,
                         num_nodes=flags.num_nodes, strategy=trainer_strategy(flags.strategy),
                         precision=flags.precision, gradient_clip_val=gradient_clip or None,
                         use_distributed_sampler=False, callbacks=callbacks, logger=loggers,
                         plugins=[AtomicCheckpointIO()], default_root_dir=run_dir, log_every_n_steps=10)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    except SystemExit:  # Lightning exits after a graceful shutdown on Ctrl-C or SIGTERM
        if not trainer.interrupted:
            raise
    except TrainingDiverged as err:
        last_path = run_dir / CHECKPOINT_DIR / "last.ckpt"
        kept = (f"the last checkpoint before it is kept: {last_path}" if last_path.is_file()
                else "no checkpoint had been saved before it")
        print(f"error: {err}; {kept}; no metrics.json written", file=sys.stderr)
        return DIVERGED_EXIT_CODE, None
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt
    if trainer.interrupted:
        last_path = run_dir / CHECKPOINT_DIR / "last.ckpt"
        hint = (f"resume with --resume (from {last_path})" if last_path.is_file()
                else "no checkpoint was saved yet (they are saved at epoch ends, every --checkpoint-every-n-steps "
                     "and on SIGTERM)")
        print(f"interrupted: {hint}; no metrics.json written", file=sys.stderr)
        return (143 if trainer.received_sigterm else 130), None
    expected_steps = max_epochs * len(datamodule.train_sampler)
    if trainer.global_step != expected_steps:
        raise RuntimeError(f"training ended after {trainer.global_step} optimizer steps, expected {expected_steps}")
    if not trainer.is_global_zero:
        return 0, None

    if not checkpoint.best_model_path:  # no epoch had a finite dev average to select on
        raise CheckpointError(f"{run_dir}: training diverged: no epoch had a finite dev average, so there is no best "
                              "checkpoint; the run is not complete (no metrics.json)")
    best_path = Path(checkpoint.best_model_path)
    best_state = load_checkpoint_file(best_path)["state_dict"]
    check_finite_run(best_state, module.dev_history, best_path)  # a diverged run is never written as complete
    module.load_state_dict(best_state)
    module.model.cpu().float()
    export_model(module.model, tokenizer, tasks, run_dir / EXPORT_DIR, source_encoder=source_encoder)
    write_json_atomic(run_dir / SCHEDULE_FILE, schedule_summary(module.step_log, schedule, batch_size))
    summary = metrics_summary(module.dev_history, best_path, run_dir)
    write_json_atomic(run_dir / METRICS_FILE, summary)
    if not getattr(trainer_flags, "keep_last_checkpoint", False):  # the run is complete: nothing to resume
        (run_dir / CHECKPOINT_DIR / "last.ckpt").unlink(missing_ok=True)
    return 0, summary


def cli() -> None:
    """Console-script entry point (``mtdnn-train``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
