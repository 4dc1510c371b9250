"""Output locations: writable before any work, and directories this toolkit owns (a record file says what
kind of output a directory is; one writer at a time; what a killed process left behind is removed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from ..errors import UserError
from .text import quote_prefix
from .writing import default_mode, make_dir, write_json_atomic


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _check_writable_dir(directory: Path, target: Path, flag: str) -> None:
    """Probe ``directory`` by creating and removing a file in it (``os.access`` says yes to root everywhere)."""
    where = f"{flag}: " if flag else ""
    if not directory.is_dir():
        raise UserError(f"{where}{target}: cannot be created, {directory} is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mtdnn-write-test.", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise UserError(f"{where}{target}: cannot write in {directory} ({err.strerror}); choose another "
                        "location") from None


NAME_MAX = 255
"""Longest file or directory name, in bytes of its UTF-8 encoding (Linux, macOS and Windows file systems)."""


def check_name_lengths(path: str | Path, flag: str = "") -> Path:
    """Refuse a path with a component longer than :data:`NAME_MAX` bytes before anything is written.

    Raises:
        UserError: naming the flag, the component's first characters and its length.
    """
    path = Path(path)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise UserError(f"{flag + ': ' if flag else ''}{quote_prefix(part, 40)}: a name of {size} bytes; file "
                            f"systems allow at most {NAME_MAX} bytes per name: choose a shorter one")
    return path


def prepare_output_path(path: str | Path, flag: str = "") -> Path:
    """Check that the file ``path`` can be written (its directory exists and is writable, or can be created),
    before any work; nothing is created.

    Args:
        flag: the command-line flag that named the path (for the message), e.g. ``--output``.

    Raises:
        UserError: ``path`` is a directory, a name in it is too long, or its nearest existing ancestor is not a
            writable directory.
    """
    path = check_name_lengths(path, flag)
    try:
        if path.is_dir():
            raise UserError(f"{flag + ': ' if flag else ''}{path}: is a directory; give a file name")
        _check_writable_dir(_nearest_existing(path.parent), path, flag)
    except OSError as err:
        raise UserError(f"{flag + ': ' if flag else ''}{path}: cannot be used ({err.strerror})") from None
    return path


def prepare_output_dir(path: str | Path, flag: str = "") -> Path:
    """Check that the directory ``path`` can be created or written in, before any work; nothing is created.

    Raises:
        UserError: ``path`` exists and is not a directory, a name in it is too long, or it cannot be created or
            written in.
    """
    path = check_name_lengths(path, flag)
    try:
        if path.exists() and not path.is_dir():
            raise UserError(f"{flag + ': ' if flag else ''}{path}: exists and is not a directory")
        _check_writable_dir(_nearest_existing(path), path, flag)
    except OSError as err:
        raise UserError(f"{flag + ': ' if flag else ''}{path}: cannot be used ({err.strerror})") from None
    return path


OUTPUT_RECORD = ".mtdnn-output.json"


LOCK_FILE = ".mtdnn.lock"
"""The record file of a directory this toolkit writes: ``{"kind": ..., "version": ...}``."""


OUTPUT_KINDS = {"run": "training run directory", "teachers": "teacher directory",
                "comparison": "paired-comparison directory (--seeds)", "transfer": "transfer output directory",
                "diagnose": "diagnose output directory"}
"""The kinds of directory the toolkit writes, each with its name in messages."""


def output_record(directory: str | Path) -> dict | None:
    """The record (:data:`OUTPUT_RECORD`) of ``directory``, or None when it has none or it cannot be read."""
    path = Path(directory) / OUTPUT_RECORD
    try:
        with path.open("rb") as f:
            raw = f.read(4096)
        record = json.loads(raw)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("kind") in OUTPUT_KINDS else None


def check_output_dir(path: str | Path, flag: str, kind: str, recognised=None) -> Path:
    """Check, before any work, that ``path`` may be used as an output directory of ``kind``; nothing is created.

    It may be new, empty, or already this toolkit's directory of the same kind: its record file
    (:data:`OUTPUT_RECORD`) names ``kind``, or ``recognised(path)`` (the kind's own files, for directories written
    before records existed) says so. Any other directory is refused, so that no user file is ever replaced.

    Args:
        flag: the flag or field that named the directory (for the message).
        kind: a key of :data:`OUTPUT_KINDS`.
        recognised: ``Path -> bool``, true for a directory of ``kind`` without a record.

    Raises:
        UserError: the directory holds other files (naming up to three), is another kind of toolkit output, or is
            not writable (:func:`prepare_output_dir`).
    """
    path = check_name_lengths(path, flag)
    where = f"{flag}: " if flag else ""
    try:
        # the lock file alone (a run killed before its first file) counts as empty
        entries = sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []
    except OSError as err:
        raise UserError(f"{where}{path}: cannot be listed ({err.strerror})") from None
    if not entries:
        return prepare_output_dir(path, flag)  # the writability probe only once the directory is ours to write
    record = output_record(path)
    if record is not None:
        if record["kind"] == kind:
            return prepare_output_dir(path, flag)
        raise UserError(f"{where}{path}: is a {OUTPUT_KINDS[record['kind']]} of this toolkit, not a "
                        f"{OUTPUT_KINDS[kind]}; choose another directory (nothing was changed)")
    if recognised is not None and recognised(path):
        return prepare_output_dir(path, flag)
    shown = ", ".join(quote_prefix(e, 40) for e in entries[:3]) + (f" and {len(entries) - 3} more"
                                                                    if len(entries) > 3 else "")
    raise UserError(f"{where}{path}: the directory holds files that are not this toolkit's ({shown}) and is not a "
                    f"{OUTPUT_KINDS[kind]}; choose a new or empty directory (nothing was changed)")


def claim_output_dir(path: str | Path, kind: str) -> Path:
    """Create ``path`` (after :func:`check_output_dir`) and write its record file, unless it has one.

    Raises:
        UserError: the directory or its record cannot be written.
    """

    try:
        version = metadata.version("mtdnn")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        version = None
    path = make_dir(path)
    if output_record(path) is None:
        write_json_atomic(path / OUTPUT_RECORD, {"kind": kind, "version": version})
    return path


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on ``<directory>/.mtdnn.lock``, held until :meth:`release` (or the
    process ends: the kernel drops it, so a killed process never leaves a stale lock).

    The lock file holds the holder's process id, for the message of a process that is refused.

    Raises:
        UserError: another process holds the lock (naming its pid and the directory), or the file cannot be made.
    """

    def __init__(self, directory: str | Path, flag: str = ""):
        import fcntl  # lazy: POSIX only, and only a lock needs it

        self.path = make_dir(directory) / LOCK_FILE
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, default_mode())
        except OSError as err:
            raise UserError(f"{self.path}: cannot create the lock file ({err.strerror})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self._fd)
            where = f"{flag}: " if flag else ""
            raise UserError(f"{where}{Path(directory)}: another mtdnn process (pid {quote_prefix(holder, 20)}) is "
                            "writing in this directory; wait for it to end or choose another directory") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


TEMPORARY = re.compile(r"^(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{6,12}\.tmp$")
"""A temporary of :func:`write_atomic`: ``<name>.<pid>.<random>.tmp``."""


TEMPORARY_DIR = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{6,12}$")
"""A temporary directory of an atomic directory write: ``.<name>.<pid>.<random>``."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's live process; a number no pid can be
        return True
    return True


def remove_stale_temporaries(directory: str | Path, names, *, locked: bool, recursive: bool = False) -> list[Path]:
    """Remove what atomic writes of a killed process left in ``directory``: files ``<name>.<pid>.<random>.tmp``
    and directories ``.<name>.<pid>.<random>``, for the ``names`` the toolkit writes there only (a set of names, or
    a predicate ``str -> bool``); nothing else, nothing behind a symbolic link.

    With ``locked`` (the caller holds the directory's :class:`DirectoryLock`, so no live writer of ours is in it)
    every such temporary is removed; without it only those whose process id is not a live process.

    Returns:
        The paths removed.
    """

    directory = Path(directory)
    wanted = names if callable(names) else (lambda name: name in names)
    removed: list[Path] = []
    if directory.is_symlink() or not directory.is_dir():
        return removed
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            entries = list(current.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir()
            match = (TEMPORARY_DIR if is_dir else TEMPORARY).match(entry.name)
            if match is None or not wanted(match["name"]):
                if is_dir and recursive:
                    pending.append(entry)
                continue
            if not locked and _alive(int(match["pid"])):
                continue
            try:
                shutil.rmtree(entry) if is_dir else entry.unlink()
            except OSError:
                continue
            removed.append(entry)
    return removed
