"""User-facing errors and the command-line wrapper that turns them into exit code 2.

Every mistake a user can make (a bad YAML field, a malformed data row, a missing checkpoint, a bad flag)
is raised as a :class:`UserError` whose message names the file, task, field and value involved. The
``python -m mtdnn.*`` entry points run through :func:`run_cli`, which prints the message and exits with 2
instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable


class UserError(Exception):
    """A problem with the user's input (files, YAML, flags). Printed without a traceback, exit code 2."""


class ConfigError(UserError):
    """A task definition, teacher/student spec or CLI flag is invalid."""


class DataError(UserError):
    """A data file is missing, empty or has a malformed row."""


class CheckpointError(UserError):
    """A run directory, checkpoint or export is missing, incomplete or does not match."""


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run ``main(argv)``; exit 2 with a one-line message on :class:`UserError`.

    Args:
        main: the command's entry function; returns an exit code or None (meaning 0).
        argv: arguments without the program name; ``None`` reads ``sys.argv[1:]``.
    """
    try:
        code = main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` of every command: a flag's default shown once (not when its help already says it, nor for
    switches and unset options), and reStructuredText double backticks removed from descriptions."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"

    def _format_text(self, text: str) -> str:
        return super()._format_text(text.replace("``", ""))


class RawHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` keeping the description's and epilog's line breaks (examples)."""
