"""Reading the toolkit's own files: the one YAML loader (safe; refuses repeated keys, anchors and aliases), JSON
the toolkit wrote, tensors (safetensors, and checkpoints through ``torch.load(weights_only=True)``)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import yaml

from ..errors import CheckpointError, ConfigError, UserError


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
