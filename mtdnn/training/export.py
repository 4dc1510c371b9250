"""Export a trained model to a directory that stands alone, and load it back.

Layout::

    export/
      encoder/              Hugging Face format: config.json, model.safetensors, tokenizer files
                            (loads with transformers.AutoModel.from_pretrained and AutoTokenizer)
      heads.safetensors     every task head's weights, keys "<task>.<parameter>"
      tasks.yaml            the task definitions the heads were trained for
      hf/<task>/            per task whose head is the encoder family's own *ForSequenceClassification,
                            *ForTokenClassification or *ForQuestionAnswering head: a standard folder of that
                            AutoModelFor... class with its tokenizer (see :mod:`mtdnn.training.hf_export`)
      mtdnn_export.json     format version, task names, the original encoder name, the hf/ folders
                            ("huggingface": {task: folder}), how each is served: auto class, pipeline, the call
                            arguments that reproduce mtdnn.predict ("serving": {task: {...}}), the tasks
                            without one ("toolkit_only": {task: why}) and the SHA-256 of every other file
                            ("digests": {path: sha256})

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
from ..fileio import (
    default_mode,
    file_digests,
    make_dir,
    read_safetensors,
    read_yaml,
    write_json_atomic,
    write_yaml_atomic,
)
from ..modeling.heads import resolve_pooling
from ..modeling.model import CHECKED_FOLDERS, EXPORT_META, MultiTaskModel, load_encoder, load_tokenizer, verify_export  # noqa: F401
from ..tasks.taskdef import TaskDef, parse_tasks
from .hf_export import write_hf_models
from .runs import complete_run

FORMAT_VERSION = 1

log = logging.getLogger(__name__)


HF_OFF = "export_hf is off: no Hugging Face folders were written (python -m mtdnn.train ... --export-hf)"


def is_export_dir(path: str | Path) -> bool:
    """Whether ``path`` holds an mtdnn export."""
    return (Path(path) / EXPORT_META).is_file()


def export_model(model: MultiTaskModel, tokenizer, tasks: dict[str, TaskDef], out_dir: str | Path,
                 source_encoder: str, hf: bool = True) -> Path:
    """Write ``model`` (float32, on CPU) with its tokenizer and task definitions to ``out_dir`` atomically.

    With ``hf`` (``TrainConfig.export_hf``), also writes ``hf/<task>/`` for the tasks
    :func:`mtdnn.training.hf_export.write_hf_models` can express; ``mtdnn_export.json``'s ``toolkit_only`` names
    every task without a folder, with the reason (``export_hf`` off, for all of them, without ``hf``). ``tasks.yaml`` records every
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
        if hf:
            folders, toolkit_only, serving = write_hf_models(model, tokenizer, tasks, tmp)
        else:
            folders, toolkit_only, serving = {}, {name: HF_OFF for name in tasks}, {}
        meta = {"format": FORMAT_VERSION, "tasks": list(tasks), "source_encoder": source_encoder,
                "huggingface": folders, "serving": serving, "toolkit_only": toolkit_only,
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
        complete_run(path)
        verify_export(path / "export")
        return path / "export"
    raise CheckpointError(f"{path}: neither an mtdnn run directory with an export nor an export directory")
