"""Export a trained model to a directory that stands alone, and load it back.

Layout::

    export/
      encoder/              Hugging Face format: config.json, model.safetensors, tokenizer files
                            (loads with transformers.AutoModel.from_pretrained and AutoTokenizer)
      heads.safetensors     every task head's weights, keys "<task>.<parameter>"
      tasks.yaml            the task definitions the heads were trained for
      hf/<task>/            per sentence-level task whose head is the encoder family's own
                            *ForSequenceClassification head: a standard AutoModelForSequenceClassification
                            folder with its tokenizer (see :mod:`mtdnn.training.hf_export`)
      mtdnn_export.json     format version, task names, the original encoder name, the hf/ folders
                            ("huggingface": {task: folder}), the tasks without one ("toolkit_only":
                            {task: why}) and the SHA-256 of every other file ("digests": {path: sha256})

The export is written to a temporary directory beside the target and renamed into place. Loading it
(:func:`load_export`, :func:`resolve_export`) checks every part against its recorded digest, so that a part
replaced by another run's (``heads.safetensors``, an edited ``encoder/config.json``) or bytes changed in place
are refused, not loaded as another model; an export written before digests were recorded loads with a warning.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import save_file

from ..errors import CheckpointError, ConfigError, UserError
from ..fileio import (default_mode, file_digest, file_digests, make_dir, read_json, read_safetensors, read_yaml,
                      write_json_atomic, write_yaml_atomic)
from ..modeling.heads import resolve_pooling
from ..modeling.model import EXPORT_META, MultiTaskModel, load_encoder, load_tokenizer
from ..tasks.taskdef import TaskDef, parse_tasks
from .hf_export import write_hf_models

FORMAT_VERSION = 1
CHECKED_FOLDERS = ("encoder/", "hf/")
"""Folders of an export whose every file must be recorded in its digests (transformers loads whatever is there)."""

log = logging.getLogger(__name__)


def is_export_dir(path: str | Path) -> bool:
    """Whether ``path`` holds an mtdnn export."""
    return (Path(path) / EXPORT_META).is_file()


def export_model(model: MultiTaskModel, tokenizer, tasks: dict[str, TaskDef], out_dir: str | Path,
                 source_encoder: str) -> Path:
    """Write ``model`` (float32, on CPU) with its tokenizer and task definitions to ``out_dir`` atomically.

    Also writes ``hf/<task>/`` for the tasks :func:`mtdnn.training.hf_export.write_hf_models` can express, and
    names the others in ``mtdnn_export.json``'s ``toolkit_only`` with the reason. ``tasks.yaml`` records every
    task's pooling, the one chosen for the encoder where the task set none. ``mtdnn_export.json`` records the
    SHA-256 of every other file (``digests``), which loading checks (:func:`verify_export`).
    """
    tasks = resolve_pooling(tasks, model.encoder)
    out_dir = Path(out_dir)
    make_dir(out_dir.parent)
    # .export.<pid>.<random>: removed by the next run's lock_run_dir if this process is killed while writing
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.{os.getpid()}.", dir=out_dir.parent))
    os.chmod(tmp, default_mode(directory=True))
    try:
        model.encoder.save_pretrained(tmp / "encoder")
        tokenizer.save_pretrained(tmp / "encoder")
        heads = {f"{k}": v.detach().float().cpu().contiguous() for k, v in model.heads.state_dict().items()}
        save_file(heads, str(tmp / "heads.safetensors"))
        doc = {"tasks": {name: {k: v for k, v in t.to_plain().items() if k != "name"} for name, t in tasks.items()}}
        write_yaml_atomic(tmp / "tasks.yaml", doc)
        folders, toolkit_only = write_hf_models(model, tokenizer, tasks, tmp)
        meta = {"format": FORMAT_VERSION, "tasks": list(tasks), "source_encoder": source_encoder,
                "huggingface": folders, "toolkit_only": toolkit_only,
                "digests": file_digests(tmp, exclude=(EXPORT_META,))}
        write_json_atomic(tmp / EXPORT_META, meta)
        for written in tmp.rglob("*"):  # safetensors writes 0600; give what a plain open() would (the umask's)
            os.chmod(written, default_mode(directory=written.is_dir()))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except (OSError, SafetensorError) as err:  # a full disk inside safetensors is a SafetensorError, not an OSError
        shutil.rmtree(tmp, ignore_errors=True)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise UserError(f"{out_dir}: cannot write the export ({reason}); nothing was replaced") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def verify_export(export_dir: str | Path, parts: str = "") -> dict:
    """Check an export's files against the digests its ``mtdnn_export.json`` records; returns the metadata.

    Args:
        parts: only the files whose relative path starts with this (``"encoder/"``); default every file.

    Every recorded file must exist with its recorded SHA-256 (hashed by buffered reads, so bytes changed in place
    without changing the size are seen), and every file under ``encoder/`` and ``hf/`` must be recorded. An
    export written before digests were recorded is loaded with a warning (nothing to check).

    Raises:
        CheckpointError: not an export, damaged metadata, or a part that is missing, changed or not recorded
            (naming the file).
    """
    export_dir = Path(export_dir)
    meta_path = export_dir / EXPORT_META
    if not meta_path.is_file():
        raise CheckpointError(f"{export_dir}: not an mtdnn export (no {EXPORT_META})")
    meta = read_json(meta_path, CheckpointError, "export metadata")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path}: damaged export metadata (not a JSON object)")
    digests = meta.get("digests")
    if digests is None:
        log.warning("%s: written before exports recorded the digests of their files; its parts are not checked "
                    "(export it again to have them checked)", meta_path)
        return meta
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise CheckpointError(f"{meta_path}: field 'digests': damaged (expected {{file: sha256}})")
    for name, recorded in sorted(digests.items()):
        if not name.startswith(parts):
            continue
        path = export_dir / name
        if not path.is_file():
            raise CheckpointError(f"{path}: part of the export is missing (recorded in {meta_path})")
        if file_digest(path) != recorded:
            _read_part(path)  # a truncated or unparsable part: that more precise message first
            raise CheckpointError(f"{path}: does not match the digest recorded in {meta_path} (the file was changed "
                                  "or comes from another export); export the run again")
    for path in sorted(p for p in export_dir.rglob("*") if p.is_file()):
        name = path.relative_to(export_dir).as_posix()
        if name.startswith(CHECKED_FOLDERS) and name.startswith(parts) and name not in digests:
            raise CheckpointError(f"{path}: not part of the export (not recorded in {meta_path}); remove it or "
                                  "export the run again")
    return meta


def _read_part(path: Path) -> None:
    """Read a part of an export by its kind (weights, YAML, JSON), raising its reader's CheckpointError when it is
    truncated or cannot be parsed (a message more precise than a digest mismatch)."""
    if path.suffix == ".safetensors":
        read_safetensors(path)
    elif path.suffix in (".yaml", ".yml"):
        read_yaml(path, CheckpointError, "export's file")
    elif path.suffix == ".json":
        read_json(path, CheckpointError, "export's file")


def load_export_tasks(export_dir: str | Path) -> dict[str, TaskDef]:
    """The task definitions stored in an export.

    Raises:
        CheckpointError: ``tasks.yaml`` is missing, damaged or invalid.
    """
    path = Path(export_dir) / "tasks.yaml"
    raw = read_yaml(path, CheckpointError, "export's task definitions")
    try:
        return parse_tasks(raw, str(path))
    except ConfigError as err:
        raise CheckpointError(str(err)) from None


def load_export(export_dir: str | Path, trust_remote_code: bool = False) -> tuple[MultiTaskModel, object, dict[str, TaskDef]]:
    """Load ``(model, tokenizer, tasks)`` from an export directory (no training run needed).

    Raises:
        CheckpointError: not an export, a part that does not match its recorded digest (:func:`verify_export`),
            encoder weights that do not fit its configuration, or heads that do not match its task definitions.
    """
    export_dir = Path(export_dir)
    verify_export(export_dir)
    tasks = load_export_tasks(export_dir)
    encoder = load_encoder(str(export_dir / "encoder"), trust_remote_code=trust_remote_code, strict=True,
                           check_digests=False)
    tokenizer = load_tokenizer(str(export_dir / "encoder"), trust_remote_code=trust_remote_code)
    model = MultiTaskModel(encoder, tasks)
    heads = read_safetensors(export_dir / "heads.safetensors")
    try:
        model.heads.load_state_dict(heads)
    except RuntimeError as err:
        raise CheckpointError(f"{export_dir}/heads.safetensors: does not match tasks.yaml ({err})") from None
    model.eval()
    return model, tokenizer, tasks


def resolve_export(path: str | Path) -> Path:
    """An export directory from a run directory (``RUN/export``) or an export directory itself, its parts
    checked against their recorded digests (:func:`verify_export`).

    Raises:
        CheckpointError: neither a complete run nor an export, or a part of the export that does not match.
    """
    path = Path(path)
    if is_export_dir(path):
        verify_export(path)
        return path
    if is_export_dir(path / "export"):
        from .runs import complete_run

        complete_run(path)
        verify_export(path / "export")
        return path / "export"
    raise CheckpointError(f"{path}: neither an mtdnn run directory with an export nor an export directory")
