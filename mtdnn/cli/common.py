"""Flag types and the flag groups several commands share."""

from __future__ import annotations

import argparse
import logging
import math

from ..tasks.taskdef import MAX_LENGTH_RANGE


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

    low, high = MAX_LENGTH_RANGE
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer (got {text!r})") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], as a task's max_length (got {text}); "
                                         "a pair needs room for its special tokens and some of each text")
    return value


def name_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name, comma-separated")
    return names


task_list = name_list


def devices(text: str) -> int | str:
    """``--devices``: a count is an int (as Lightning and YAML take it), anything else (auto, 0,1) a string."""
    return int(text) if text.isdigit() else text


def add_inference_args(parser: argparse.ArgumentParser, data_dir_use: str = "") -> None:
    """The flags of the commands that run a trained model: ``--checkpoint``, ``--data-dir``, ``--batch-size``,
    ``--device``; ``data_dir_use`` (e.g. "for --split") says what the data root is read for."""
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint of the run instead of its best (a path, or relative to the run directory)")
    parser.add_argument("--data-dir", default=None, help=f"data root{' ' + data_dir_use if data_dir_use else ''} "
                        "(default: the run's, else $MTDNN_DATA_DIR, else ../shared/data)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="examples per batch (default: the run's --eval-batch-size, 64)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto (cuda when available)")
    add_trust_remote_code_arg(parser)


TRUST_HELP = ("let the model's folder run code of its own (transformers' trust_remote_code); never taken from a "
              "run, export or config file: see the README's Security section")


def add_trust_remote_code_arg(parser: argparse.ArgumentParser) -> None:
    """``--trust-remote-code``: the only way a command that loads a trained model runs the model's own code."""
    parser.add_argument("--trust-remote-code", action="store_true", help=TRUST_HELP)


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
