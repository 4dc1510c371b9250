"""``python -m mtdnn.evaluate MODEL``: flags -> :func:`mtdnn.evaluation.evaluate.evaluate` -> table and JSON.

Example::

    python -m mtdnn.evaluate runs/<run> --tasks rte,mrpc --split dev --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import HelpFormatter, run_cli
from ..evaluation.evaluate import check_output_path, evaluate, format_table
from ..fileio import prepare_output_path, write_json_atomic
from .common import add_inference_args, setup_logging, task_list


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mtdnn.evaluate",
                                description="Score a trained run or export on labelled splits, with training's "
                                            "metrics.",
                                formatter_class=HelpFormatter)
    p.add_argument("model", help="a complete run directory or an export directory")
    p.add_argument("--tasks", type=task_list, default=None,
                   help="comma-separated tasks (default: every task of the model that has the split)")
    p.add_argument("--split", default="dev", help="a labelled split of the task definitions")
    p.add_argument("--output", default=None,
                   help="JSON file to write (default: MODEL/eval-<split>[-<checkpoint>].json)")
    add_inference_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    # keeps torch out of import time
    from ..training.inference import load_model

    check_output_path(args.output)
    loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
    suffix = f"-{Path(args.checkpoint).stem}" if args.checkpoint else ""
    output = Path(args.output) if args.output else loaded.model_dir / f"eval-{args.split}{suffix}.json"
    prepare_output_path(output, "--output")
    result = evaluate(loaded, args.tasks, args.split, args.data_dir, args.batch_size, args.device)
    write_json_atomic(output, {"model": str(loaded.model_dir), "checkpoint": loaded.source, **result})
    print(format_table(result["tasks"], result["examples"], args.split, result["average"],
                       {n: loaded.tasks[n].metric_names for n in result["tasks"]}))
    print(f"written: {output}", file=sys.stderr)
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-evaluate``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
