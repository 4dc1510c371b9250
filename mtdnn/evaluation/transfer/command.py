"""``python -m mtdnn.transfer``: few-shot transfer, fine-tuning encoders on seeded subsets (arXiv 1901.11504, 4.4).

Example::

    python -m mtdnn.transfer --task snli --encoders packaged-minilm,runs/<mt-run> --sizes 200,549 --seeds 3 \\
        --data-dir ../shared/data --output-dir runs/transfer-snli

MT-DNN's domain-adaptation experiment fine-tunes each encoder on 0.1%, 1%, 10% and 100% of a task's training
data and compares accuracy. Here, for every seed, the task's training pool is put in one stratified order
(:mod:`mtdnn.tasks.subsets`) and each subset is a prefix of it: smaller subsets lie inside larger ones, and all
encoders see the same subsets. Every (encoder, size, seed) fine-tunes a fresh copy of the encoder with a fresh
task head (or, with ``--reuse-head``, a run's head for the same labels) under one set of hyper-parameters,
:class:`TransferSettings`, then scores the full evaluation split once, after the last epoch: there is no model
selection on the set being reported.

The output directory receives, at the end and atomically: ``results.json`` (per encoder and size: examples,
accuracy per seed, mean and sample standard deviation, null for one seed), ``results.md`` (the same as a
Markdown table, with the set-up) and ``learning_curve.png`` (accuracy against training examples, log x axis,
one line per encoder, error bars of one standard deviation). Each finished (encoder, size, seed) is also kept
in ``per_run/`` (with the ids of the pool examples it trained on), so an interrupted sweep resumes where it
stopped when the same command is run again.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import warnings
from pathlib import Path

from ...errors import ConfigError, DataError, HelpFormatter, run_cli
from ...fileio import make_dir, prepare_output_dir, write_atomic, write_json_atomic
from ...tasks.taskdef import load_task_defs, select_tasks
from .encoders import parse_encoder_list, resolve_encoder_spec
from .report import CURVE_PNG, RESULTS_JSON, RESULTS_MD, build_report, plot_learning_curve, render_markdown
from .settings import SETTINGS
from .sweep import PER_RUN_DIR, choose_splits, run_sweep

log = logging.getLogger("mtdnn.transfer")


def fraction_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions in (0, 1] (got {text!r})") from None
    bad = [v for v in values if not 0 < v <= 1]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"a fraction must be in (0, 1] (got {bad[0] if bad else text!r})")
    return values


def size_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers (got {text!r})") from None
    bad = [v for v in values if v <= 0]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"a size must be a positive number of examples "
                                         f"(got {bad[0] if bad else text!r})")
    return values


def build_parser() -> argparse.ArgumentParser:
    from ...training.trainer import positive_int

    p = argparse.ArgumentParser(prog="python -m mtdnn.transfer", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--task", required=True, help="the target task (a classification task), e.g. snli or scitail")
    p.add_argument("--task-defs", default="task_defs/glue.yaml", help="task-definition YAML holding --task")
    p.add_argument("--encoders", required=True,
                   help="comma-separated [label=]encoder: packaged-minilm, a Hugging Face name or path, or a run "
                        "directory (or export) of mtdnn.train / mtdnn.distill, whose encoder gets a fresh head")
    p.add_argument("--sizes", type=size_list, default=None, help="subset sizes in examples, e.g. 50,200,549,1666")
    p.add_argument("--fractions", type=fraction_list, default=None,
                   help="subset sizes as fractions of the pool, in (0, 1]: size = round(f * pool)")
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1: subset order and training seed")
    p.add_argument("--data-dir", default=None,
                   help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--output-dir", default=None, help="where results go (default: runs/transfer-<task>)")
    p.add_argument("--pool-split", default=None,
                   help="split the subsets are drawn from (default: train, or dev when the task has no train)")
    p.add_argument("--eval-split", default=None,
                   help="split scored once after training (default: dev when the pool is train, else test)")
    p.add_argument("--reuse-head", nargs="?", const="", default=None, metavar="TASK",
                   help="for run encoders, start from the run's head of TASK (default: --task) instead of a fresh "
                        "one; its labels must be the same, in the same order")
    p.add_argument("--limit-eval-examples", type=positive_int, default=None, metavar="N",
                   help="score only the first N examples of the evaluation split (smoke tests; reported)")
    p.add_argument("--note", action="append", default=[], help="a line added to the report's notes (repeatable)")
    p.add_argument("--fresh", action="store_true", help="ignore finished runs kept in OUTPUT_DIR/per_run/")
    p.add_argument("--accelerator", default="auto", help="cpu, gpu, cuda, mps or auto (one device)")
    p.add_argument("--precision", default="32-true", help="32-true (default), bf16-mixed or 16-mixed (GPU)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow encoders with custom code from the hub (off by default)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command with ``argv`` (default: ``sys.argv[1:]``); the exit code (0, or 130 when interrupted).

    Raises:
        ConfigError, DataError, CheckpointError: bad flags, task definitions, data or runs, before any training.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning.pytorch",
                 "lightning.pytorch.utilities.rank_zero", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)  # one Trainer per run: its banner each time is noise
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*predefined batch sampler.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # from Lightning's internals, once per Trainer

    from ...tasks.data import load_split, resolve_data_dir
    from ...tasks.subsets import check_sizes, sizes_from_fractions, stratified_order
    from ...training.trainer import check_lightning_flags

    settings = SETTINGS

    # 1. Validate everything that can be wrong before training anything.
    check_lightning_flags(accelerator=args.accelerator, precision=args.precision, devices=1)  # one device per run
    task = select_tasks(load_task_defs(args.task_defs), [args.task], args.task_defs)[args.task]
    if task.type != "classification":
        raise ConfigError(f"--task {task.name}: few-shot transfer needs a classification task (stratified subsets, "
                          f"accuracy); '{task.name}' is a {task.type} task")
    if args.sizes is None and args.fractions is None:
        raise ConfigError("give --sizes (examples) or --fractions (of the pool), or both")
    pool_split, eval_split = choose_splits(task, args.pool_split, args.eval_split)
    data_dir = resolve_data_dir(args.data_dir)
    pool_raw = load_split(task, pool_split, data_dir)
    eval_raw = load_split(task, eval_split, data_dir)
    if not eval_raw.labelled:
        raise DataError(f"{eval_raw.source}: task '{task.name}', split '{eval_split}' has no labels to score")
    pool_labels = [int(ex.label) for ex in pool_raw.examples]
    pool_size, num_classes = len(pool_labels), len(set(pool_labels))
    origin: dict[int, str] = {}
    for k in args.sizes or []:
        origin.setdefault(k, f"--sizes {k}")
    for f, k in zip(args.fractions or [], sizes_from_fractions(args.fractions or [], pool_size)):
        origin.setdefault(k, f"--fractions {f:g} (round({f:g} x {pool_size}))")
    sizes = sorted(origin)
    check_sizes(sizes, pool_size, num_classes, origin)
    reuse = (args.reuse_head or task.name) if args.reuse_head is not None else None
    encoders = [resolve_encoder_spec(label, spec, task, reuse, args.trust_remote_code)
                for label, spec in parse_encoder_list(args.encoders)]
    if reuse is not None:
        if not any(e.kind == "run" for e in encoders):
            raise ConfigError(f"--reuse-head {reuse}: none of the encoders is a run of this toolkit, so there is no "
                              "head to reuse (drop the flag, or list a run directory in --encoders)")
        for e in encoders:
            if e.kind != "run":
                log.warning("--reuse-head: %s is not a run of this toolkit; it starts from a fresh head", e.label)
    seeds = list(range(args.seeds))
    orders = {seed: stratified_order(pool_labels, seed) for seed in seeds}
    out_dir = Path(args.output_dir) if args.output_dir else Path("runs") / f"transfer-{task.name}"
    make_dir(prepare_output_dir(out_dir, "--output-dir"))
    eval_examples = min(len(eval_raw.examples), args.limit_eval_examples or len(eval_raw.examples))

    metric = "accuracy" if "accuracy" in task.metric_names else task.metric_names[0]

    # 2. Fine-tune and score every (encoder, size, seed); finished runs are kept in per_run/ for resuming.
    # 2. Fine-tune and score every (encoder, size, seed); finished runs are kept in per_run/ for resuming.
    sigint = signal.getsignal(signal.SIGINT)
    try:
        records = run_sweep(task, encoders, sizes, orders, pool_split, eval_split, data_dir, eval_examples, metric,
                            settings, out_dir, args.accelerator, args.precision, args.trust_remote_code, args.fresh)
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, SystemExit) and err.code not in (None, 0, 1):
            raise
        print(f"interrupted: finished runs are kept in {out_dir / PER_RUN_DIR}; run the same command again to "
              "resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt

    # 3. The report: learning_curve.png, results.md and, last, results.json, each written atomically.
    report = build_report(task, args, settings, encoders, records, seeds, sizes, origin, pool_raw, eval_raw,
                          eval_examples, metric)
    plot_learning_curve(report, out_dir / CURVE_PNG)
    write_atomic(out_dir / RESULTS_MD, render_markdown(report))
    write_json_atomic(out_dir / RESULTS_JSON, report)
    print(render_markdown(report).split("\n## ")[0])
    print(f"results: {out_dir / RESULTS_JSON}, {out_dir / RESULTS_MD}, {out_dir / CURVE_PNG}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-transfer``)."""
    run_cli(main)
