"""The encoders of a transfer comparison: ``--encoders`` items resolved to :class:`Encoder` and checked to load.

An item is ``packaged-minilm``, a Hugging Face name or path, or a run directory (or export) of this toolkit,
whose encoder gets a fresh head or, with ``--reuse-head``, the run's head for the same labels.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CheckpointError, ConfigError
from ...fileio import read_safetensors, read_yaml
from ...tasks.taskdef import TaskDef


@dataclass
class Encoder:
    """One encoder of the comparison.

    ``kind``: ``packaged`` (the embedded MiniLM), ``huggingface`` (a name or path ``AutoModel`` loads) or ``run``
    (a multi-task or student run of this toolkit, or its export: its encoder, with a fresh head unless
    ``head_state`` holds a reused one). ``path`` is what :func:`mtdnn.modeling.model.load_encoder` receives.
    """

    label: str
    spec: str
    kind: str
    path: str
    export: Path | None = None
    trained_on: dict[str, dict] = field(default_factory=dict)
    head_from: str | None = None
    head_state: dict | None = None
    limited: dict = field(default_factory=dict)
    """A run's settings that make it a smoke test rather than a trained encoder (``limit_train_examples``,
    ``limit_eval_examples``, ``max_steps``, from its ``config.yaml``); empty otherwise."""

    @property
    def head(self) -> str:
        if self.head_from:
            return f"reused: the run's '{self.head_from}' head"
        return "fresh"

    def fingerprint(self) -> str:
        """Identifies the weights for the per-run cache: the name, or the size and time of a directory's files."""
        path = Path(self.path) if self.kind != "packaged" else Path(_packaged_path())
        if not path.is_dir():
            return self.path
        stats = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(path.iterdir()) if p.is_file()]
        return hashlib.sha256("|".join(stats).encode()).hexdigest()[:16]


def _packaged_path() -> str:
    # keeps torch out of import time
    from ...modeling.model import PACKAGED_MINILM, resolve_encoder

    return resolve_encoder(PACKAGED_MINILM)


def parse_encoder_list(text: str) -> list[tuple[str, str]]:
    """``[label=]spec,...`` as ``[(label, spec)]``; the label defaults to the name, or a run's directory name.

    Raises:
        ConfigError: an empty list or two encoders with the same label.
    """
    pairs = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        label, spec = item.split("=", 1) if "=" in item else ("", item)
        if not label:
            path = Path(spec)
            label = spec if not path.exists() else (path.resolve().parent.name if path.resolve().name == "export"
                                                    else path.resolve().name)
        pairs.append((label, spec))
    if not pairs:
        raise ConfigError("--encoders: give at least one encoder (packaged-minilm, a Hugging Face name or path, "
                          "or a run directory)")
    names = [safe_name(label) for label, _ in pairs]  # labels also name per_run/ directories
    duplicated = sorted({label for label, name in zip([p[0] for p in pairs], names) if names.count(name) > 1})
    if duplicated:
        raise ConfigError(f"--encoders: label {duplicated[0]!r} is used twice (or differs from another only in "
                          "characters a directory name cannot hold); name them as label=spec")
    return pairs


def _is_run_like(path: Path) -> bool:
    # keeps torch out of import time
    from ...training.export import is_export_dir

    return path.is_dir() and (is_export_dir(path) or any((path / name).exists()
                                                          for name in ("export", "metrics.json", "checkpoints")))


def reused_head_state(export: Path, source_task: str, task: TaskDef) -> dict:
    """The weights of the export's ``source_task`` head, to initialise ``task``'s head.

    Raises:
        CheckpointError: the export has no such head, or it was trained for another task type, other labels
            (or another order of them) or another pooling.
    """
    # keeps torch out of import time
    from ...training.export import load_export_tasks

    saved = load_export_tasks(export)
    old = saved.get(source_task)
    if old is None:
        raise CheckpointError(f"{export}: --reuse-head {source_task}: the run has no head for task '{source_task}' "
                              f"(its heads: {', '.join(saved)})")
    problems = []
    if old.type != task.type:
        problems.append(f"type {old.type} vs {task.type}")
    if old.head_type != task.head_type:
        problems.append(f"head type {old.head_type} vs {task.head_type}")
    if old.labels != task.labels:
        problems.append(f"labels {old.labels} vs {task.labels}")
    if task.head.pooling is not None and old.head.pooling != task.head.pooling:  # unset: see resolve_encoder_spec
        problems.append(f"pooling {old.head.pooling} vs {task.head.pooling}")
    if problems:
        raise CheckpointError(f"{export}: --reuse-head {source_task}: the run's '{source_task}' head does not fit "
                              f"task '{task.name}' ({'; '.join(problems)}); a head is reused only for the same type, "
                              "the same labels in the same order and the same pooling")
    state = read_safetensors(export / "heads.safetensors")
    prefix = source_task + "."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def resolve_encoder_spec(label: str, spec: str, task: TaskDef, reuse_head: str | None,
                         trust_remote_code: bool = False) -> Encoder:
    """Turn one ``--encoders`` item into an :class:`Encoder`, and check that it loads and fits the task.

    The encoder is built once here (and discarded), so that a wrong name, a run without an export, an encoder
    without the pooler the task's head asks for, or a reused head that does not fit fail before any training.

    Raises:
        ConfigError: the encoder or its tokenizer cannot be loaded, or does not fit the task's head.
        CheckpointError: a run directory that is incomplete, or a reused head that does not fit.
    """
    # keeps torch out of import time
    from ...modeling.model import PACKAGED_MINILM, MultiTaskModel, load_encoder, load_tokenizer
    from ...training.export import load_export_tasks, resolve_export

    path = Path(spec)
    if spec == PACKAGED_MINILM:
        encoder = Encoder(label, spec, "packaged", spec)
    elif _is_run_like(path):
        export = resolve_export(path)
        tasks = load_export_tasks(export)
        trained_on = {name: {"train": t.splits["train"].path if "train" in t.splits else None,
                             "description": t.description} for name, t in tasks.items()}
        encoder = Encoder(label, spec, "run", str(export / "encoder"), export=export, trained_on=trained_on,
                          limited=run_limits_of(export))
        if reuse_head:
            encoder.head_from = reuse_head
            encoder.head_state = reused_head_state(export, reuse_head, task)
    else:
        encoder = Encoder(label, spec, "huggingface", spec)
    try:
        load_tokenizer(encoder.path, trust_remote_code)
        model = MultiTaskModel(load_encoder(encoder.path, trust_remote_code), {task.name: task})
    except ConfigError as err:
        raise ConfigError(f"--encoders {label}: {err}") from None
    if encoder.head_state is not None:
        chosen, old = model.tasks[task.name].head.pooling, load_export_tasks(encoder.export)[reuse_head].head.pooling
        if chosen != old:  # the task sets no pooling and the encoder's default is not the head's
            raise CheckpointError(f"{encoder.export}: --reuse-head {reuse_head}: the head was trained with pooling "
                                  f"{old} but task '{task.name}' gets {chosen}; set head.pooling: {old} in its "
                                  "definition")
        try:
            model.heads[task.name].load_state_dict(encoder.head_state)
        except RuntimeError as err:
            raise CheckpointError(f"{encoder.export}: --reuse-head {reuse_head}: the head's weights do not fit "
                                  f"this encoder ({err})") from None
    return encoder


LIMIT_SETTINGS = ("limit_train_examples", "limit_eval_examples", "max_steps")


def run_limits_of(export: Path) -> dict:
    """The limits (:data:`LIMIT_SETTINGS` that are set) of the run whose export is ``export``, read from the run's
    ``config.yaml`` beside it; empty for an export without its run, or a run without limits."""
    config = export.parent / "config.yaml"
    if export.name != "export" or not config.is_file():
        return {}
    try:
        saved = read_yaml(config, CheckpointError, "run configuration")
    except CheckpointError:
        return {}
    return {k: saved[k] for k in LIMIT_SETTINGS if isinstance(saved, dict) and saved.get(k)}


def safe_name(label: str) -> str:
    """``label`` as a directory name (it names the encoder's ``per_run/`` directory)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "encoder"
