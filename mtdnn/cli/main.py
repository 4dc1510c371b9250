"""``mtdnn <command> [flags]`` and ``python -m mtdnn <command> [flags]``: one command in front of the seven.

``mtdnn train ...`` is ``python -m mtdnn.train ...`` (and the console script ``mtdnn-train``): the command's own
module parses the flags, so ``mtdnn <command> --help`` is that command's help. ``mtdnn --version`` prints the
installed distribution's version (``importlib.metadata``; the version is written once, in ``pyproject.toml``).
Nothing heavy is imported before the command runs: ``mtdnn --help`` and ``mtdnn <command> --help`` import no torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from ..errors import run_cli

COMMANDS = {
    "train": "multi-task training of a shared encoder with per-task heads (MT-DNN Algorithm 1)",
    "evaluate": "dev/test scores of a run or export, or of a labelled file (--file)",
    "predict": "predictions of a run or export: a split, a file, raw text, stdin",
    "teachers": "per-task teacher ensembles fine-tuned from a multi-task run, and their soft targets",
    "distill": "one multi-task student from the teachers' soft targets (MT-DNN-KD); --seeds N: paired comparison",
    "transfer": "few-shot transfer on seeded SNLI/SciTail subsets against a baseline encoder",
    "diagnose": "HANS, adversarial ARCT, cue statistics, partial-input baselines, and a report of them",
}
"""Each command: ``mtdnn.cli.<name>`` (its ``main(argv) -> exit code``) and its one-line summary."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--version`` and the command; the command's own flags are left to its parser."""
    listing = "\n".join(f"  {name:<10}{summary}" for name, summary in COMMANDS.items())
    p = argparse.ArgumentParser(prog="mtdnn", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Multi-task learning and knowledge distillation of transformer encoders "
                                            "(MT-DNN, MT-DNN-KD).",
                                epilog=f"commands:\n{listing}\n\n'mtdnn <command> --help' for a command's flags; "
                                       "'python -m mtdnn.<command>' and 'mtdnn-<command>' run the same.")
    p.add_argument("--version", action="version", version=f"mtdnn {__version__}")
    p.add_argument("command", choices=list(COMMANDS), metavar="command", help="one of: " + ", ".join(COMMANDS))
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's flags")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``mtdnn <command> ARGS``: the command module's ``main(ARGS)``; returns its exit code (argparse exits
    2 for an unknown command, 0 for ``--help`` and ``--version``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.error(f"give a command: {', '.join(COMMANDS)} (mtdnn --help lists them)")
    if argv[0] in COMMANDS:  # the command's own --help, not this parser's
        command, rest = argv[0], argv[1:]
    else:
        args = parser.parse_args(argv)
        command, rest = args.command, args.args
    module = importlib.import_module(f"{__package__}.{command}")
    return module.main(rest)


def cli() -> None:
    """Console-script entry point (``mtdnn``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
