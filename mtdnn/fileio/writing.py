"""Writing files so that a reader sees the old file or the new one, never half of one (a temporary beside the
target, renamed into place), with the permissions of the process's umask; YAML dumping and appending lines."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError


def default_mode(directory: bool = False) -> int:
    """The permissions a plain ``open``/``mkdir`` would give under the current umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


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
