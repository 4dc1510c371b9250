"""The one Markdown-table helper of the reports (``teachers.md``, ``report.md``, ``comparison.md``, ``results.md``,
the diagnostics' and the benchmarks' tables).

The lowest layer of the package (beside :mod:`mtdnn.errors` and :mod:`mtdnn.fileio`): it imports nothing of
``mtdnn``, so every stage and ``bench/`` may use it.
"""

from __future__ import annotations

from typing import Sequence

RULES = {"l": "---", "r": "---:"}


def markdown_row(cells: Sequence[str | None]) -> str:
    """One table line: ``| a | b |``.

    A cell is written with one space on each side (an empty string gives ``|  |``); ``None`` is a cell left
    blank, written as one space between its bars (``| |``). Markdown renders both as empty cells; both spellings
    are kept so that the reports written before this helper existed stay byte-identical.
    """
    return "|" + "|".join(" " if c is None else f" {c} " for c in cells) + "|"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str | None]],
                   align: str | Sequence[str] | None = None) -> list[str]:
    """A GitHub-flavoured Markdown table as lines: the header, the rule, one line per row (no trailing newline).

    Args:
        header: the column names.
        rows: one list of cell texts per row (see :func:`markdown_row` for empty cells); a row may have fewer or
            more cells than the header (the caller's responsibility: Markdown pads or cuts it).
        align: per column, ``"l"`` (left, ``---``) or ``"r"`` (right, ``---:``), as a string (``"lrrr"``) or a
            sequence; None: every column left-aligned.

    Returns:
        ``["| h1 | h2 |", "|---|---:|", "| a | b |", ...]``.

    Raises:
        ValueError: ``align`` does not give one ``l`` or ``r`` per column.
    """
    align = "l" * len(header) if align is None else align
    if len(align) != len(header) or any(a not in RULES for a in align):
        raise ValueError(f"align {align!r}: expected one 'l' or 'r' per column ({len(header)} columns)")
    return [markdown_row(header), "|" + "".join(RULES[a] + "|" for a in align)] + [markdown_row(r) for r in rows]
