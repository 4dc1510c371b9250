"""SHA-256 digests of a file's or a directory's bytes (buffered reads): what exports and tokenized-split cache
entries record of their parts."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import CheckpointError, UserError


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
