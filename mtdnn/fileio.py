"""Every file the toolkit reads or writes goes through this module: one helper per kind of file.

- :func:`read_yaml` / :func:`parse_yaml`: the one YAML loader (safe; refuses repeated keys, anchors and aliases).
- :func:`read_json`: JSON files the toolkit wrote (manifests, fingerprints, export metadata).
- :func:`read_safetensors` / :func:`read_checkpoint`: tensors (``torch.load(weights_only=True)``).
- :func:`prepare_output_path` / :func:`prepare_output_dir`: check an output location is writable before any work.
- :func:`check_output_dir` / :func:`claim_output_dir`: a directory is only written into when it is new, empty or one
  of this toolkit's outputs of the same kind (its record file says so); :class:`DirectoryLock`: one writer at a time;
  :func:`remove_stale_temporaries`: what a killed process left behind.
- :func:`write_atomic` / :func:`write_json_atomic` / :func:`write_yaml_atomic`: a reader sees the old file or the
  new one, never half of one.
- :func:`file_digest` / :func:`tree_digest`: SHA-256 of a file's or a directory's bytes (buffered reads), the
  digests that exports and tokenized-split cache entries record of their parts.
- :func:`split_lines`, :func:`parse_decimal`, :func:`parse_integer`, :func:`quote_prefix`: the one rule for where a
  line of a data file ends, the number grammar of labels and scores, and how messages quote file content.

Every failure is a :class:`~mtdnn.errors.UserError` naming the file (exit code 2, no traceback). A test
(``tests/test_fileio.py``) fails if a module of ``mtdnn/`` reads or writes such files any other way.
The lowest layer of the package (beside :mod:`mtdnn.errors`): every stage may import it.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from .errors import CheckpointError, ConfigError, UserError

# ------------------------------------------------------------------------------------------------ permissions


def default_mode(directory: bool = False) -> int:
    """The permissions a plain ``open``/``mkdir`` would give under the current umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


# ------------------------------------------------------------------------------------------------------- YAML


class _Refused(yaml.constructor.ConstructorError):
    """YAML that is valid but refused by the toolkit (a repeated key, an anchor or alias)."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors and aliases (no "billion laughs") and repeated mapping keys."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise _Refused(
                None, None, f"{kind}{event.anchor} is not allowed (anchors and aliases are refused; write the "
                f"value out)", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeConstructor reports it
                continue
            if first is not None:
                raise _Refused(
                    None, None, f"key {key!r} is repeated (first on line {first}, again on line "
                    f"{key_node.start_mark.line + 1}); the second would silently replace the first",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str, error: type[UserError] = ConfigError) -> Any:
    """Parse YAML text with the toolkit's loader (safe; no repeated keys, anchors or aliases).

    Raises:
        ``error``: naming ``source`` and the line of the problem.
    """
    try:
        loader = _StrictLoader(text)  # a SafeLoader that refuses repeated keys, anchors and aliases
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f" line {mark.line + 1}:" if mark is not None else ""
        kind = "" if isinstance(err, _Refused) else " not valid YAML:"
        raise error(f"{source}:{line}{kind} {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML: {err}") from None


def yaml_float(value: Any) -> Any:
    """PyYAML (YAML 1.1) reads ``5e-5`` without a dot as a string; take it as the number it spells (other values
    unchanged). Used by the pydantic validators of run configurations and specs."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


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


def _read_text(path: Path, error: type[UserError], what: str) -> str:
    """The UTF-8 text of ``path``; ``error`` naming the file when it is missing, unreadable or not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: cannot read the {what} (file not found)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read the {what} ({getattr(err, 'strerror', None) or err})") from None


def read_yaml(path: str | Path, error: type[UserError] = ConfigError, what: str = "YAML file") -> Any:
    """Read a YAML file with :func:`parse_yaml`.

    Args:
        error: the :class:`~mtdnn.errors.UserError` subclass to raise (ConfigError for files a user writes,
            CheckpointError for files the toolkit wrote).
        what: the kind of file, for the message ("task definitions", "teacher spec", ...).

    Raises:
        ``error``: unreadable, not UTF-8, not valid YAML, a repeated key, an anchor or alias (naming the file).
    """
    path = Path(path)
    return parse_yaml(_read_text(path, error, what), str(path), error)


# ------------------------------------------------------------------------------------------------------- JSON


def read_json(path: str | Path, error: type[UserError] = CheckpointError, what: str = "JSON file") -> Any:
    """Read a JSON file.

    Raises:
        ``error``: missing, unreadable or not valid JSON (naming the file and, for JSON errors, the line).
    """
    path = Path(path)
    text = _read_text(path, error, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{path}: line {err.lineno}: the {what} is damaged or not JSON ({err.msg})") from None


# ---------------------------------------------------------------------------------------------------- tensors


def read_safetensors(path: str | Path) -> dict:
    """``{name: tensor}`` of a safetensors file, on CPU.

    Raises:
        CheckpointError: missing, truncated or damaged (naming the file).
    """
    # keeps torch out of import time
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: weights file not found")
    try:
        return load_file(str(path))
    except Exception as err:  # SafetensorError, OSError, ValueError, ...: every one means a damaged file
        raise CheckpointError(f"{path}: cannot read the weights, the file is truncated or damaged "
                              f"({type(err).__name__}: {err})") from None


def check_zip_crc(path: Path) -> None:
    """Check every record of a zip-format checkpoint (``torch.save``'s format) against its CRC-32.

    ``torch.load`` does not verify them, so flipped bytes inside a tensor would load silently as wrong weights.
    A file that is not a zip (the legacy format) is left to ``torch.load``. About 0.15 s per 100 MB.

    Raises:
        CheckpointError: a record whose bytes do not match its CRC (naming the file and record).
    """

    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: cannot read the checkpoint, it is truncated or damaged ({err})") from None
    if bad is not None:
        raise CheckpointError(f"{path}: the checkpoint is damaged (record {bad} does not match its CRC-32); "
                              "retrain or restore it")


def read_checkpoint(path: str | Path) -> dict:
    """``torch.load(path, map_location="cpu", weights_only=True)``, after :func:`check_zip_crc`.

    Raises:
        CheckpointError: missing, truncated, damaged or not a checkpoint (naming the file).
    """
    # keeps torch out of import time
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    check_zip_crc(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # zip and unpickling errors have many types
        if "Weights only load failed" in str(err):  # a pickled object other than tensors and plain values
            raise CheckpointError(f"{path}: cannot read the checkpoint: it holds objects other than tensors and plain "
                                  "values, refused because unpickling them could run code (this toolkit never writes "
                                  "them), or it is damaged") from None
        raise CheckpointError(f"{path}: cannot read the checkpoint, it is truncated or damaged ({err})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a checkpoint (holds a {type(state).__name__}, not a mapping)")
    return state


# ----------------------------------------------------------------------------------------------------- output


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


# ------------------------------------------------------------------------------------- directories the toolkit owns

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


def write_torch_atomic(path: str | Path, obj: Any) -> None:
    """``torch.save(obj)`` to ``path`` atomically (:func:`write_atomic`'s temporary and ``os.replace``).

    Raises:
        UserError: the location cannot be written (naming the file); the previous file is kept.
    """
    # keeps torch out of import time
    import torch

    _write_through_temporary(Path(path), "wb", lambda f: torch.save(obj, f))


def temporary_prefix(path: Path) -> str:
    """The prefix of an atomic write's temporary for ``path``: its name and this process's id."""
    return f"{path.name}.{os.getpid()}."


def make_dir(path: str | Path) -> Path:
    """``mkdir -p`` with failures as :class:`~mtdnn.errors.UserError` naming the directory."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{path}: cannot create the directory ({err.strerror})") from None
    return path


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    Raises:
        UserError: the location cannot be written (permissions, disk full), naming the file; nothing is left.
    """
    _write_through_temporary(Path(path), "w", lambda f: f.write(text))


def _write_through_temporary(path: Path, mode: str, write) -> None:
    """``write(f)`` into ``<name>.<pid>.<random>.tmp`` beside ``path`` (umask permissions), fsync, then
    ``os.replace``; the temporary is removed on any failure. ``mode``: ``"w"`` (UTF-8 text) or ``"wb"``."""
    try:
        make_dir(path.parent)
    except UserError as err:
        raise UserError(f"{path}: cannot write ({err})") from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror})") from None
    os.chmod(tmp, default_mode())
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write ({err.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """:func:`write_atomic` of ``obj`` as indented JSON."""
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


class _PlainDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that writes a value used twice out twice (no anchors, which :func:`parse_yaml` refuses)."""

    def ignore_aliases(self, data):
        return True


def dump_yaml(obj: Any) -> str:
    """``obj`` as YAML text (keys in their order), readable back by :func:`parse_yaml`."""
    return yaml.dump(obj, Dumper=_PlainDumper, sort_keys=False)


def append_lines(path: str | Path, lines: list[str]) -> None:
    """Append ``lines`` (each ending in a newline) to a log-like file, creating its directory.

    Raises:
        UserError: the file cannot be written, naming it.
    """
    path = Path(path)
    make_dir(path.parent)
    try:
        with path.open("a", encoding="utf-8") as f:
            f.writelines(lines)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror})") from None


def write_yaml_atomic(path: str | Path, obj: Any) -> None:
    """:func:`write_atomic` of ``obj`` as YAML."""
    write_atomic(path, dump_yaml(obj))


# ---------------------------------------------------------------------------------------------------- digests


def file_digest(path: str | Path, error: type[UserError] = CheckpointError) -> str:
    """The SHA-256 (hex) of a file's bytes, read in 1 MiB blocks (never mapped whole).

    Raises:
        ``error``: the file cannot be read (naming it).
    """
    path = Path(path)
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    return h.hexdigest()


def file_digests(directory: str | Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """``{relative posix path: file_digest}`` of every file under ``directory`` (sorted), leaving out the
    relative paths in ``exclude`` (a record that holds these digests itself)."""
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): file_digest(p) for p in files
            if p.relative_to(directory).as_posix() not in exclude}


_TREE_DIGESTS: dict[tuple, str] = {}


def tree_digest(directory: str | Path) -> str:
    """A hash (24 hex digits) of every file of a directory, their relative paths and bytes (an export: encoder
    weights and config, tokenizer, heads, task definitions, metadata).

    Remembered per process while no file's size or modification time changes (teacher members compare it with
    the digest they recorded; an export's own loading checks :func:`file_digest` of each part, never remembered).
    """
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _TREE_DIGESTS:
        h = hashlib.sha256()
        for path in files:
            h.update(str(path.relative_to(directory)).encode() + b"\0")
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
        _TREE_DIGESTS[key] = h.hexdigest()[:24]
    return _TREE_DIGESTS[key]


# ------------------------------------------------------------------------------------------ parsing data files

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
