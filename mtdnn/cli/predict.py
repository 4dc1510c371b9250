"""``python -m mtdnn.predict MODEL --task T``: flags -> :func:`mtdnn.evaluation.predict.predict_examples` -> file.

See :mod:`mtdnn.evaluation.predict` for the input and output formats.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError, RawHelpFormatter, run_cli
from ..evaluation import predict as library
from ..evaluation.evaluate import check_file, with_file_split
from ..fileio import prepare_output_path, remove_stale_temporaries, write_atomic
from .common import add_inference_args, setup_logging

FILE_SPLIT = "file"  # the split name of --file


def build_parser() -> argparse.ArgumentParser:
    doc = library.__doc__
    p = argparse.ArgumentParser(prog="python -m mtdnn.predict", description=doc.split("\n\n")[0],
                                formatter_class=RawHelpFormatter,
                                epilog=doc.split("\n\n", 2)[2])
    p.add_argument("model", help="a complete run directory or an export directory")
    p.add_argument("--task", default=None, help="the task to predict (default: the model's only task)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--split", help="a split of the task definition, read from the data root (e.g. test)")
    source.add_argument("--text", nargs="+", metavar="TEXT", help="one example: one text, or a pair")
    source.add_argument("--input", metavar="FILE", help="tsv or jsonl examples, one per line; - reads stdin")
    source.add_argument("--file", metavar="PATH", help="a file in the task's own format (the parsing settings of "
                                                       "its dev split), as if it were a split named 'file'")
    p.add_argument("--input-format", choices=["auto", "tsv", "jsonl"], default="auto",
                   help="auto: jsonl for *.jsonl files or lines starting with '{', else tsv")
    p.add_argument("--format", choices=["tsv", "jsonl", "glue"], default=None,
                   help="output format (default: glue for the test split of a GLUE task, else tsv)")
    p.add_argument("--output", default=None, help="output file or directory (default: stdout)")
    add_inference_args(p, "for --split")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    # keeps torch out of import time
    from ..tasks.tokenized import tokenize_examples, tokenized_split
    from ..training.inference import load_model

    file = check_file(args.file)  # before the model is loaded
    loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
    if args.task is None and len(loaded.tasks) > 1:
        raise ConfigError(f"--task: {loaded.model_dir} has several tasks ({', '.join(loaded.tasks)}); name one")
    task = loaded.task(args.task or next(iter(loaded.tasks)))
    if file is not None:  # the file as a split of the task, read with its directory as the data root
        task = loaded.tasks[task.name] = with_file_split(task, file, FILE_SPLIT)
        args.split, args.data_dir = FILE_SPLIT, str(file.parent)
    if task.kind.read_file is not None:  # token-level types: words and entities, answers over windows
        # keeps torch out of import time
        from ..evaluation.token_predict import predict_token_task
        from ..training.inference import resolve_device

        text, count = predict_token_task(args, loaded, task, resolve_device(args.device))
        fmt = args.format or "jsonl"
        return _write(text, library.output_path(args.output, task, args.split or "input", fmt), count, fmt)
    fmt = args.format or ("glue" if args.split == "test" and task.glue_name else "tsv")
    if fmt == "glue" and (args.split is None or not task.glue_name):
        raise ConfigError(f"--format glue: needs --split and a task with a glue_name (task '{task.name}' "
                          f"{'has glue_name ' + task.glue_name if task.glue_name else 'has none'})")

    if args.split is not None:
        split_name = args.split
        split = tokenized_split(task, args.split, loaded.resolve_data_dir(args.data_dir), loaded.tokenizer,
                                loaded.max_length)
    else:
        split_name = "input"
        examples = (library.text_example(args.text, task) if args.text
                    else library.read_input(args.input, args.input_format, task))
        split = tokenize_examples(examples, task, loaded.tokenizer, loaded.max_length)

    path = library.output_path(args.output, task, split_name, fmt)
    if path is not None:
        prepare_output_path(path, "--output")
    predictions = library.predict_examples(loaded, task, split, args.batch_size, args.device,
                                           progress=f"{task.name} {split_name}")
    text = library.format_predictions(task, split.ids, predictions, fmt)
    return _write(text, path, len(split), fmt)


def _write(text: str, path, count: int, fmt: str) -> int:
    """Write the predictions to ``path`` atomically, or to stdout when None; first remove the temporaries of
    earlier predictions to ``path`` whose process is gone (``<output>.<pid>.<random>.tmp``, left by a kill)."""

    if path is None:
        sys.stdout.write(text)
    else:
        remove_stale_temporaries(path.parent, {path.name}, locked=False)
        write_atomic(path, text)
        print(f"{count} predictions ({fmt}) written: {path}", file=sys.stderr)
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-predict``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
