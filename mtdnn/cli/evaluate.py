"""``python -m mtdnn.evaluate MODEL``: flags -> :func:`mtdnn.evaluation.evaluate.evaluate` -> table and JSON.

Example::

    python -m mtdnn.evaluate runs/<run> --tasks rte,mrpc --split dev --data-dir ../shared/data
    python -m mtdnn.evaluate runs/<run> --tasks conll2003 --file held-out/test.txt --split heldout

``--file`` scores a labelled file of one task that its definitions do not name, read in the task's own format
(the parsing settings of its dev split, or of its first split read from a file) under the ``--split`` name.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError, HelpFormatter, run_cli
from ..evaluation.evaluate import check_file, check_output_path, evaluate, format_table, with_file_split
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
    p.add_argument("--split", default="dev", help="a labelled split of the task definitions (with --file: the name "
                                                  "its split gets)")
    p.add_argument("--file", default=None, metavar="PATH",
                   help="score this labelled file instead, in the task's own format (one task: --tasks T, or the "
                        "model's only task)")
    p.add_argument("--output", default=None,
                   help="JSON file to write (default: MODEL/eval-<split>[-<checkpoint>].json; with --file, "
                        "MODEL/eval-file-<name>[-<checkpoint>].json)")
    add_inference_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    # keeps torch out of import time
    from ..training.inference import load_model

    check_output_path(args.output)
    file = check_file(args.file)  # before the model is loaded
    if file is not None and args.tasks is not None and len(args.tasks) != 1:
        raise ConfigError(f"--file: scores one task; --tasks names {len(args.tasks)} ({', '.join(args.tasks)})")
    loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
    data_dir = args.data_dir
    if file is not None:
        if args.tasks is None and len(loaded.tasks) > 1:
            raise ConfigError(f"--file: {loaded.model_dir} has several tasks ({', '.join(loaded.tasks)}); name one "
                              "with --tasks")
        name = args.tasks[0] if args.tasks else next(iter(loaded.tasks))
        loaded.tasks[name] = with_file_split(loaded.task(name), file, args.split)
        args.tasks, data_dir = [name], str(file.parent)
    suffix = f"-{Path(args.checkpoint).stem}" if args.checkpoint else ""
    stem = f"file-{file.stem}" if file is not None else args.split  # a file's scores never replace a split's
    output = Path(args.output) if args.output else loaded.model_dir / f"eval-{stem}{suffix}.json"
    prepare_output_path(output, "--output")
    result = evaluate(loaded, args.tasks, args.split, data_dir, args.batch_size, args.device)
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
