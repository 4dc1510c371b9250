"""The text rules of data files: where a line ends, the number grammar of labels and scores, where a file stops
decoding, and how messages quote file content."""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any


def undecodable_at(path: str | Path, encoding: str) -> str:
    """Where a file first fails to decode as ``encoding``: ``"line N, byte B of the line"`` (1-based line), for
    error messages (a decoder's own offset counts from the chunk it was given, not from the file's start)."""

    decoder = codecs.getincrementaldecoder(encoding)()
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                decoder.decode(line)
            except UnicodeDecodeError as err:
                return f"line {number}, byte {err.start + 1} of the line"
    return "the end of the file"


LINE_END = re.compile(r"\r\n|\r|\n")
"""Where a line of a data file ends: ``\\n``, ``\\r\\n`` or a lone ``\\r`` (as Python's ``csv`` module and
``open(newline="")`` iteration read files). No other character ends a line: U+2028, U+2029, U+0085, form feed,
vertical tab and U+001C..U+001E, which ``str.splitlines`` also splits on, are text inside a field."""


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their ends, split by :data:`LINE_END` only (a final line end adds no line).

    Every reader of raw line-based input uses this rule (``predict --input``); files read by lines
    (tsv/csv/jsonl/conll) are iterated with ``open(newline="")``, which ends lines at the same three."""
    lines = LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


_INTEGER = re.compile(r"[+-]?[0-9]+")


NUMBER_GRAMMAR = ("an optional sign, ASCII digits with an optional decimal point, an optional exponent "
                  "(e.g. 3, -0.5, .5, 2., 1e-3); no underscores, no nan or inf, surrounding whitespace ignored")


def parse_decimal(text: str) -> float:
    """A number of a data file (a regression score): ``text`` stripped of surrounding whitespace (``str.strip``)
    must match ``[+-]?(digits[.digits]|.digits)([eE][+-]?digits)?`` with ASCII digits; Python's ``float`` would
    also take ``1_0`` (10.0), ``nan``, ``inf`` and non-ASCII digits.

    Raises:
        ValueError: naming the grammar (callers add file, line, task and field).
    """
    value = text.strip()
    if not _DECIMAL.fullmatch(value):
        raise ValueError(f"not a number ({NUMBER_GRAMMAR})")
    number = float(value)
    if number in (float("inf"), float("-inf")):
        raise ValueError("not a finite number (out of the float range)")
    return number


def parse_integer(text: str) -> int | None:
    """An integer of a data file (a class or candidate id): ``[+-]?digits`` (ASCII) after stripping surrounding
    whitespace; None when ``text`` is not one (the caller names what it expected)."""
    value = text.strip()
    return int(value) if _INTEGER.fullmatch(value) else None


def quote_prefix(value: Any, limit: int = 80, quoted: bool = True) -> str:
    """How every message quotes content read from a file (a header, a column name, a line, a value): ``repr`` of
    at most the first ``limit`` characters of a string, or the first ``limit`` characters of another value's
    ``repr``, with the number of characters left out, so that a file that is not what it should be (an
    environment, a binary file on one line) is never printed whole. ``quoted=False`` shows a string as it is
    (JSON text, which escapes control characters itself)."""
    if isinstance(value, str) and not quoted:
        return value if len(value) <= limit else f"{value[:limit]}... ({len(value) - limit} more characters)"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value) - limit} more characters)"
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown) - limit} more characters)"


def quote_names(names: list, limit: int = 80, count: int = 20) -> str:
    """Column names for a message: at most ``count`` of them, each by :func:`quote_prefix` of ``limit``
    characters when longer, joined by ``, `` (and how many were left out)."""
    shown = [str(n) if len(str(n)) <= limit and str(n).isprintable() else quote_prefix(n, limit)
             for n in names[:count]]
    more = f", ... ({len(names) - count} more)" if len(names) > count else ""
    return ", ".join(shown) + more
