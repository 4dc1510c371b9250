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
import sys
from pathlib import Path

from ..errors import HelpFormatter, Interrupted, run_cli, validate
from ..evaluation.transfer.report import CURVE_PNG, RESULTS_JSON, RESULTS_MD, render_markdown
from ..evaluation.transfer.spec import TransferSpec
from .common import positive_int


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
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a size is listed twice (got {text!r}); each size is one set of runs")
    return values


def build_parser() -> argparse.ArgumentParser:
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
    """Flags -> :class:`~mtdnn.evaluation.transfer.spec.TransferSpec` -> :func:`~mtdnn.evaluation.transfer.run.run_transfer`;
    the exit code (0, or 130 when interrupted).

    Raises:
        ConfigError, DataError, CheckpointError: bad flags, task definitions, data or runs, before any training.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning.pytorch",
                 "lightning.pytorch.utilities.rank_zero", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)  # one Trainer per run: its banner each time is noise
    from ..evaluation.transfer.run import run_transfer  # keeps torch out of import time

    settings = {k: v for k, v in vars(args).items() if v is not None or k in ("sizes", "fractions")}
    settings["encoders"] = [e for e in args.encoders.split(",") if e.strip()]
    spec = validate(TransferSpec, settings, "command line", flags=True)
    try:
        report = run_transfer(spec)
    except Interrupted as err:
        print(f"interrupted: {err}", file=sys.stderr)
        return err.exit_code
    out_dir = Path(spec.output_dir) if spec.output_dir else Path("runs") / f"transfer-{spec.task}"
    print(render_markdown(report).split("\n## ")[0])
    print(f"results: {out_dir / RESULTS_JSON}, {out_dir / RESULTS_MD}, {out_dir / CURVE_PNG}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-transfer``)."""
    run_cli(main)
