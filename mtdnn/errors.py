"""User-facing errors and the command-line wrapper that turns them into exit code 2.

Every mistake a user can make (a bad YAML field, a malformed data row, a missing checkpoint, a bad flag)
is raised as a :class:`UserError` whose message names the file, task, field and value involved. The
``python -m mtdnn.*`` entry points run through :func:`run_cli`, which prints the message and exits with 2
instead of a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Callable

from pydantic import ValidationError


class UserError(Exception):
    """A problem with the user's input (files, YAML, flags). Printed without a traceback, exit code 2."""


class ConfigError(UserError):
    """A task definition, teacher/student spec or CLI flag is invalid."""


class DataError(UserError):
    """A data file is missing, empty or has a malformed row."""


class CheckpointError(UserError):
    """A run directory, checkpoint or export is missing, incomplete or does not match."""


def format_validation_error(source: str, err, flags: bool = False) -> str:
    """One line per problem of a pydantic ``ValidationError``: ``SOURCE: field 'a.b': what is wrong (value: ...)``.

    With ``flags``, a field is named as its command-line flag (``--warmup-ratio``).
    """
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a check across fields names its fields itself
            lines.append(f"{source}: {msg}")
            continue
        path = ".".join(str(p) for p in e["loc"])
        where = f"--{str(e['loc'][0]).replace('_', '-')}" if flags else f"field '{path}'"
        shown = repr(e.get("input"))
        lines.append(f"{source}: {where}: {msg} (value: {shown[:200] + '...' if len(shown) > 200 else shown})")
    return "\n".join(lines)


def validate(model, raw, source: str, flags: bool = False):
    """``model.model_validate(raw)`` for a pydantic model; problems become one :class:`ConfigError`.

    Raises:
        ConfigError: one line per problem (:func:`format_validation_error`).
    """

    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(source, err, flags=flags)) from None


def check_bools(where: str, **flags) -> None:
    """Refuse API flags that are not ``True`` or ``False`` (``overwrite="no"`` would otherwise count as true).

    Raises:
        ConfigError: naming ``where``, the argument and its type.
    """
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: argument '{name}' must be True or False (got {type(value).__name__} "
                              f"{value!r:.40})")


class RunStopped(Exception):
    """A training run that stopped before completing, after saving what it could; not a user error.

    ``exit_code`` is the command's; ``label`` starts the line the command prints.
    """

    label = "error"

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Interrupted(RunStopped):
    """Stopped by Ctrl-C (exit code 130) or SIGTERM (143); ``--resume`` continues it."""

    label = "interrupted"


class Diverged(RunStopped):
    """Stopped on a non-finite loss or gradient norm (exit code 3); the last checkpoint before it is kept."""


RANK_LOST_EXIT_CODE = 1


class RankLost(RunStopped):
    """Another process of a distributed run died (its collective failed here): this one stops too (exit code 1),
    with one message instead of the communication library's traceback; ``--resume`` continues from ``last.ckpt``."""


SIGTERM_EXIT_CODE = 143


class Terminated(BaseException):
    """SIGTERM outside training (export, teacher caching, prediction): raised by :func:`run_cli`'s handler so that
    the command stops with one message and exit code 143. A ``BaseException``: ``except Exception`` does not
    swallow it. (Inside ``trainer.fit`` the toolkit's own handler stops training at a step boundary instead.)"""

    exit_code = SIGTERM_EXIT_CODE


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run ``main(argv)``; exit 2 with a one-line message on :class:`UserError`.

    A :class:`RunStopped` prints its label and message and exits with its code (130/143 interrupted, 3 diverged,
    1 another rank died). SIGTERM outside training raises :class:`Terminated`: one line and exit code 143.

    Args:
        main: the command's entry function; returns an exit code or None (meaning 0).
        argv: arguments without the program name; ``None`` reads ``sys.argv[1:]``.
    """

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        code = main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except RunStopped as err:
        print(f"{err.label}: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except Terminated:
        print("interrupted: SIGTERM: the command stopped before completing; what it had finished is kept (run it "
              "again; an interrupted training run continues with --resume)", file=sys.stderr)
        sys.exit(SIGTERM_EXIT_CODE)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
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
