"""Teacher ensembles and their cached outputs: ``python -m mtdnn.teachers TEACHERS_SPEC`` (MT-DNN-KD, stage 2a).

MT-DNN-KD (Liu et al. 2019, arXiv 1904.09482): for each task, an ensemble of models fine-tuned from the multi-task
model is the teacher, and its averaged class probabilities on the training set are the soft targets of one
multi-task student (:mod:`mtdnn.distill`). Here, for every task of a teacher spec (``teachers/*.yaml``):

1. each of M members is fine-tuned on that task alone from the multi-task run, as a normal
   ``python -m mtdnn.train ... --init-from RUN`` run (best epoch on dev, the selection rule of every model);
   members differ in seed and, optionally, dropout (``--dropout``: every dropout of encoder and head);
2. each member runs once in inference mode over the task's train and dev splits; its float32 logits (regression:
   predictions) are stored by example id as a ``datasets.Dataset`` with a fingerprint of the data, the tokenizer
   and the member's exported weights, written atomically and reused while the fingerprint holds;
3. the members' dev scores, the ensemble's dev score (averaged probabilities) and the members' pairwise
   disagreement go to ``teachers.json`` and ``teachers.md``.

An interrupted build resumes: members with a complete run directory are not trained again, and cached outputs are
not recomputed. The teacher directory::

    teachers.yaml                     the resolved spec: multi-task run, tasks, members, settings (the student reads it)
    <task>/member-<k>/                a complete training run (config.yaml, checkpoints/, export/, metrics.json)
    <task>/member-<k>.json            what member k was built from (settings, multi-task run, data), checked on reuse
    <task>/logits/member-<k>-<split>/ datasets.Dataset: id (str), logits (float32, outputs) + fingerprint.json
    teachers.json, teachers.md        dev scores of members and ensemble, pairwise disagreement

Soft targets are not stored as probabilities: the student computes q = mean_m softmax(z_m / T) from the cached
logits, so the temperature T stays a student setting.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import CheckpointError, ConfigError, run_cli
from .taskdef import TaskDef, load_task_defs, select_tasks

log = logging.getLogger("mtdnn.teachers")

MANIFEST_FILE = "teachers.yaml"
SUMMARY_JSON, SUMMARY_MD = "teachers.json", "teachers.md"
FINGERPRINT_FILE = "fingerprint.json"
CACHE_VERSION = 1


# ----------------------------------------------------------------------------------------------------- specs


def _yaml_float(value: Any) -> Any:
    """PyYAML (YAML 1.1) reads ``5e-5`` without a dot as a string; take it as the number it spells."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


class Spec(BaseModel):
    """Base of the teacher and student specs: strict types, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FinetuneSpec(Spec):
    """Training settings, passed to ``python -m mtdnn.train`` as the flags of the same names."""

    max_epochs: int = Field(default=3, gt=0)
    lr: float = Field(default=5e-5, gt=0)
    batch_size: int = Field(default=32, gt=0)
    eval_batch_size: int = Field(default=64, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    gradient_clip: float = Field(default=1.0, ge=0)
    max_length: int | None = Field(default=None, gt=0)
    limit_train_examples: int | None = Field(default=None, gt=0)
    pad_to_multiple_of: int = Field(default=1, gt=0)

    @field_validator("lr", "weight_decay", "warmup_ratio", "gradient_clip", mode="before")
    @classmethod
    def _floats(cls, value):
        return _yaml_float(value)

    def train_flags(self) -> list[str]:
        """These settings as ``mtdnn.train`` flags (``--max-epochs 3 --lr 5e-05 ...``)."""
        flags = []
        for name, value in self.model_dump().items():
            if value is not None:
                flags += [f"--{name.replace('_', '-')}", str(value)]
        return flags


class VarySpec(Spec):
    """What differs between the members of an ensemble: one seed (and optionally one dropout) per member.

    ``dropout`` is passed as ``mtdnn.train --dropout``: it replaces every dropout probability of the member
    (encoder attention and hidden layers, task head); without it the encoder's and task definition's apply.
    """

    seed: list[int] | None = None
    dropout: list[float] | None = None

    @field_validator("dropout", mode="before")
    @classmethod
    def _dropout_floats(cls, value):
        return [_yaml_float(v) for v in value] if isinstance(value, list) else value

    @field_validator("dropout")
    @classmethod
    def _dropout_range(cls, value):
        for v in value or []:
            if not 0.0 <= v < 1.0:
                raise ValueError(f"a dropout must be in [0, 1) (got {v})")
        return value


class TeacherSpec(Spec):
    """A teacher spec (``teachers/*.yaml``); relative paths are relative to the working directory.

    ``task_defs``: the task-definition file; ``from_run``: the multi-task run the members start from
    (``--from-run`` overrides it); ``output_dir``: the teacher directory; ``tasks``: one ensemble each;
    ``members``: ensemble size; ``vary``: per-member seeds (default 1..members) and dropouts (default: the
    encoder's and task definition's); ``finetune``: the members' training settings.
    """

    task_defs: str
    from_run: str | None = None
    output_dir: str
    tasks: list[str] = Field(min_length=1)
    members: int = Field(default=3, ge=1)
    vary: VarySpec = VarySpec()
    finetune: FinetuneSpec = FinetuneSpec()

    @model_validator(mode="after")
    def _members_differ(self) -> "TeacherSpec":
        for name in ("seed", "dropout"):
            values = getattr(self.vary, name)
            if values is not None and len(values) != self.members:
                raise ValueError(f"field 'vary.{name}': lists {len(values)} values for {self.members} members "
                                 "(field 'members'); give one per member")
        settings = [(s, d) for s, d in zip(self.seeds, self.dropouts)]
        for i, a in enumerate(settings):
            if a in settings[:i]:
                raise ValueError(f"field 'vary': members {settings.index(a) + 1} and {i + 1} have the same seed and "
                                 f"dropout {a}; members of an ensemble must differ")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"field 'tasks': lists a task twice ({self.tasks})")
        return self

    @property
    def seeds(self) -> list[int]:
        return list(self.vary.seed or range(1, self.members + 1))

    @property
    def dropouts(self) -> list[float | None]:
        return list(self.vary.dropout or [None] * self.members)


def format_spec_error(source: str, err: ValidationError) -> str:
    """One line per problem: ``FILE: field 'a.b': what is wrong (value: ...)``."""
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a check across fields names its fields itself
            lines.append(f"{source}: {msg}")
            continue
        shown = repr(e.get("input"))
        lines.append(f"{source}: field '{'.'.join(str(p) for p in e['loc'])}': {msg} "
                     f"(value: {shown[:200] + '...' if len(shown) > 200 else shown})")
    return "\n".join(lines)


def load_spec(path: str | Path, model: type[Spec], kind: str) -> Spec:
    """Read a YAML spec file and validate it into ``model``.

    Raises:
        ConfigError: unreadable file, invalid YAML, or an invalid field (naming the file, field and value).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the {kind} spec ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a {kind} spec is a mapping of fields (got {type(raw).__name__})")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_spec_error(str(path), err)) from None


# ----------------------------------------------------------------------------------------------- fingerprints


def data_fingerprint(task: TaskDef, split: str, data_dir: Path) -> dict:
    """``{"digest", "count"}`` of one split: a hash of the rows' source (file bytes, carving) and the parsing rules
    that give examples their ids, texts and labels (as in the tokenized-split cache key of :mod:`mtdnn.data`).

    Raises:
        DataError: see :func:`mtdnn.data.load_split`.
    """
    from .data import load_split

    raw = load_split(task, split, data_dir)
    rules = {k: v for k, v in task.to_plain().items()
             if k in ("type", "text", "candidates", "label", "labels", "on_malformed", "drop_labels")}
    rules["split"] = task.splits[split].model_dump(mode="json")
    payload = json.dumps({"source": raw.digest, "rules": rules, "ids": [ex.id for ex in raw.examples]}, sort_keys=True)
    return {"digest": hashlib.sha256(payload.encode()).hexdigest()[:24], "count": len(raw.examples)}


_DIGESTS: dict[tuple, str] = {}


def export_digest(export_dir: Path) -> str:
    """A hash of every file of an export (encoder weights and config, tokenizer, heads, task definitions).

    Remembered per process while no file's size or modification time changes.
    """
    files = sorted(p for p in Path(export_dir).rglob("*") if p.is_file())
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        for path in files:
            h.update(str(path.relative_to(export_dir)).encode() + b"\0")
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
        _DIGESTS[key] = h.hexdigest()[:24]
    return _DIGESTS[key]


def num_outputs(task: TaskDef) -> int:
    """Outputs per example: classes (classification), candidates (ranking), 1 (regression)."""
    return task.num_candidates if task.type == "ranking" else task.num_outputs


# -------------------------------------------------------------------------------------------- cached outputs


def member_dir(teacher_dir: Path, task: str, member: int) -> Path:
    return Path(teacher_dir) / task / f"member-{member}"


def logits_dir(teacher_dir: Path, task: str, member: int, split: str) -> Path:
    return Path(teacher_dir) / task / "logits" / f"member-{member}-{split}"


@torch.inference_mode()
def member_outputs(export_dir: Path, task_name: str, split: str, data_dir: Path, batch_size: int = 64,
                   max_length: int | None = None, device: str = "cpu") -> tuple[list[str], np.ndarray]:
    """Run an exported member once over a split, in eval mode (no dropout), batched as dev evaluation is.

    Returns:
        ``(ids, outputs)``: ``outputs`` ``(examples, outputs)`` float32 in the split's row order (logits;
        regression: predictions, ``outputs = 1``; ranking: candidate scores).
    """
    from .data import tokenized_split
    from .export import load_export
    from .inference import predict_outputs

    model, tokenizer, tasks = load_export(export_dir)  # in eval mode
    task = tasks[task_name]
    rows = tokenized_split(task, split, data_dir, tokenizer, max_length)
    outputs = predict_outputs(model.to(device), task, rows, tokenizer.pad_token_id or 0, batch_size, device=device)
    return list(rows.ids), outputs.reshape(len(rows), -1).numpy().astype(np.float32)


def write_outputs(path: Path, ids: list[str], outputs: np.ndarray, fingerprint: dict) -> None:
    """Save ``(id, logits)`` rows with ``datasets`` and ``fingerprint.json`` to a temporary directory, then
    rename it into place (a reader sees the old cache or the new one, never half of one)."""
    import datasets

    features = datasets.Features({"id": datasets.Value("string"),
                                  "logits": datasets.List(datasets.Value("float32"), length=outputs.shape[1])})
    ds = datasets.Dataset.from_dict({"id": ids, "logits": outputs}, features=features)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        ds.save_to_disk(str(tmp))
        (tmp / FINGERPRINT_FILE).write_text(json.dumps(fingerprint, indent=2) + "\n", encoding="utf-8")
        old = path.with_name(f".{path.name}.old")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_fingerprint(path: Path) -> dict | None:
    """The cache's fingerprint, or None when the cache is absent or unreadable."""
    try:
        return json.loads((Path(path) / FINGERPRINT_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_outputs(path: Path) -> tuple[list[str], np.ndarray, dict]:
    """``(ids, outputs (examples, outputs) float32, fingerprint)`` of a cache written by :func:`write_outputs`.

    Raises:
        CheckpointError: the cache is missing or damaged.
    """
    import datasets

    fingerprint = read_fingerprint(path)
    if fingerprint is None:
        raise CheckpointError(f"{path}: cached teacher outputs not found (no {FINGERPRINT_FILE}); "
                              "build them with python -m mtdnn.teachers")
    try:
        columns = datasets.load_from_disk(str(path)).with_format("numpy")[:]
    except Exception as err:  # datasets raises many types for a damaged directory
        raise CheckpointError(f"{path}: cannot read the cached teacher outputs ({err})") from None
    return [str(i) for i in columns["id"]], np.asarray(columns["logits"], dtype=np.float32), fingerprint


def align(cached_ids: list[str], outputs: np.ndarray, ids: list[str], source: str) -> np.ndarray:
    """Rows of ``outputs`` (keyed by ``cached_ids``) in the order of ``ids`` (which may be a subset).

    Raises:
        CheckpointError: duplicate cached ids, or an id of the data absent from the cache (never a silent
            misalignment).
    """
    position = {i: row for row, i in enumerate(cached_ids)}
    if len(position) != len(cached_ids):
        raise CheckpointError(f"{source}: duplicate example ids in the cached teacher outputs")
    missing = [i for i in ids if i not in position]
    if missing:
        raise CheckpointError(f"{source}: {len(missing)} example id(s) of the data are not in the cached teacher "
                              f"outputs (e.g. {missing[:3]}); they were computed for other data")
    return outputs[[position[i] for i in ids]]


def teacher_outputs(teacher_dir: Path, task: TaskDef, split: str, data_dir: Path, ids: list[str],
                    fingerprint: dict | None = None) -> np.ndarray:
    """Every member's cached outputs for ``ids`` of a split, checked against the data and the members' exports.

    Args:
        fingerprint: :func:`data_fingerprint` of the split (computed when None).

    Returns:
        ``(len(ids), members, outputs)`` float32.

    Raises:
        CheckpointError: no teachers for the task, a member's run, export or cache is missing, or a cache was
            computed from other data (count, ids, fingerprint) or another version of the member.
    """
    manifest = read_manifest(teacher_dir)
    manifest_path = Path(teacher_dir) / MANIFEST_FILE
    if task.name not in manifest["tasks"]:
        raise CheckpointError(f"{manifest_path}: no teachers for task '{task.name}' (teachers were built for "
                              f"{', '.join(manifest['tasks'])}); build them, or train the task on gold labels only")
    fingerprint = fingerprint or data_fingerprint(task, split, data_dir)
    stacked = []
    for member in manifest["tasks"][task.name]["members"]:
        k = member["member"]
        export = member_dir(teacher_dir, task.name, k) / "export"
        if not (export / "heads.safetensors").is_file():
            raise CheckpointError(f"{export}: checkpoint of teacher member {k} of task '{task.name}' not found "
                                  "(the teacher build is incomplete; rerun python -m mtdnn.teachers)")
        path = logits_dir(teacher_dir, task.name, k, split)
        cached_ids, outputs, stored = read_outputs(path)
        where = path / FINGERPRINT_FILE
        if stored.get("data") != fingerprint["digest"] or len(cached_ids) != fingerprint["count"]:
            raise CheckpointError(
                f"{where}: field 'data': the cached outputs of task '{task.name}' ({split}, member {k}) were computed "
                f"from another version of the data ({len(cached_ids)} rows, digest {stored.get('data')}; the data "
                f"now has {fingerprint['count']} rows, digest {fingerprint['digest']}); rebuild the teachers")
        if stored.get("member_export") != export_digest(export):
            raise CheckpointError(f"{where}: field 'member_export': teacher member {k} of task '{task.name}' changed "
                                  f"since its outputs were cached; rerun python -m mtdnn.teachers")
        if outputs.shape[1] != num_outputs(task):
            raise CheckpointError(f"{where}: {outputs.shape[1]} outputs per example, task '{task.name}' has "
                                  f"{num_outputs(task)}")
        stacked.append(align(cached_ids, outputs, ids, str(path)))
    return np.stack(stacked, axis=1)


# --------------------------------------------------------------------------------------------------- scoring


def score(task: TaskDef, outputs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The task's dev metrics of ``outputs`` (logits or probabilities ``(n, classes)``, or scores ``(n,)``)."""
    from .metrics import build_metrics, compute_metrics, update_metrics

    metrics = build_metrics(task)
    update_metrics(metrics, task.type, outputs, labels, torch.ones(len(labels)))
    return compute_metrics(metrics)


def ensemble_outputs(task_type: str, outputs: torch.Tensor) -> torch.Tensor:
    """The ensemble of ``outputs`` ``(n, members, outputs)``: averaged probabilities ``(n, classes)`` at T = 1,
    or the mean prediction ``(n,)`` for regression."""
    from .losses import ensemble_prediction, ensemble_probabilities

    return ensemble_prediction(outputs) if task_type == "regression" else ensemble_probabilities(outputs)


def pairwise_disagreement(task_type: str, outputs: torch.Tensor) -> list[dict]:
    """For each pair of members, the fraction of examples whose predicted class differs (regression: the mean
    absolute difference of their predictions). ``outputs`` ``(n, members, outputs)``."""
    members = outputs.shape[1]
    pairs = []
    for i in range(members):
        for j in range(i + 1, members):
            if task_type == "regression":
                value = (outputs[:, i, 0] - outputs[:, j, 0]).abs().mean()
            else:
                value = (outputs[:, i].argmax(-1) != outputs[:, j].argmax(-1)).float().mean()
            pairs.append({"members": [i + 1, j + 1], "value": float(value)})
    return pairs


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(teacher_dir: Path, tasks: dict[str, TaskDef], data_dir: Path) -> dict:
    """Per task: each member's dev scores (its run's ``metrics.json``, best epoch), their mean and sample standard
    deviation, the ensemble's dev scores (probabilities averaged over members) and the pairwise disagreement;
    and the same averaged over tasks (each task's first metric).

    Raises:
        CheckpointError: a member run is incomplete or its cached dev outputs are missing or stale.
    """
    from .data import load_split
    from .metrics import average_score
    from .runs import complete_run

    manifest = read_manifest(teacher_dir)
    report: dict[str, Any] = {"teachers": str(teacher_dir), "from_run": manifest["from_run"], "tasks": {}}
    per_member: dict[int, dict] = {}
    ensemble_scores: dict[str, dict] = {}
    for name, task in tasks.items():
        metric = task.metric_names[0]
        members = []
        for member in manifest["tasks"][name]["members"]:
            k = member["member"]
            dev = complete_run(member_dir(teacher_dir, name, k))["best"]["tasks"][name]
            members.append({**member, "dev": dev, "score": dev[metric]})
            per_member.setdefault(k, {})[name] = dev
        raw = load_split(task, "dev", data_dir)
        outputs = torch.from_numpy(teacher_outputs(teacher_dir, task, "dev", data_dir, [ex.id for ex in raw.examples]))
        labels = torch.tensor([ex.label for ex in raw.examples],
                              dtype=torch.float32 if task.type == "regression" else torch.long)
        ensemble = score(task, ensemble_outputs(task.type, outputs), labels)
        ensemble_scores[name] = ensemble
        mean, std = _mean_std([m["score"] for m in members])
        pairs = pairwise_disagreement(task.type, outputs)
        if pairs and all(p["value"] == 0 for p in pairs):
            log.warning("task '%s': the %d members make identical dev predictions; vary their seeds or dropout",
                        name, len(members))
        measure = ("mean absolute difference of predictions" if task.type == "regression"
                   else "fraction of examples with a different predicted class")
        report["tasks"][name] = {"metric": metric, "members": members, "mean": mean, "std": std,
                                 "ensemble": {"dev": ensemble, "score": ensemble[metric]},
                                 "disagreement": {"measure": measure, "pairs": pairs}}
    names = {n: t.metric_names for n, t in tasks.items()}
    member_averages = [average_score(scores, names) for _, scores in sorted(per_member.items())]
    mean, std = _mean_std(member_averages)
    report["average"] = {"members": member_averages, "mean": mean, "std": std,
                         "ensemble": average_score(ensemble_scores, names)}
    return report


def render_markdown(report: dict, title: str) -> str:
    """A Markdown table of a :func:`summarize` report (with a ``student`` column when the report has one)."""
    tasks = report["tasks"]
    members = max(len(t["members"]) for t in tasks.values())
    has_student = "student" in report["average"]
    head = (["task", "metric"] + [f"member {k}" for k in range(1, members + 1)] + ["mean ± sd", "ensemble"]
            + (["student"] if has_student else []))
    lines = [f"# {title}", "", "Dev scores (each task's first metric; the average is over tasks). Members: best "
             "epoch of each member's run; ensemble: class probabilities (regression: predictions) averaged over "
             "members; sd: sample standard deviation over members.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v: "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"  # noqa: E731
    for name, t in tasks.items():
        row = [name, t["metric"]] + [fmt(m["score"]) for m in t["members"]] + [""] * (members - len(t["members"]))
        row += [f"{fmt(t['mean'])} ± {fmt(t['std'])}", fmt(t["ensemble"]["score"])]
        row += [fmt(t["student"]["score"])] if has_student else []
        lines.append("| " + " | ".join(row) + " |")
    avg = report["average"]
    row = ["**average**", ""] + [fmt(v) for v in avg["members"]] + [f"{fmt(avg['mean'])} ± {fmt(avg['std'])}",
                                                                     fmt(avg["ensemble"])]
    row += [fmt(avg["student"])] if has_student else []
    lines.append("| " + " | ".join(row) + " |")
    for name, t in report.get("gold_tasks", {}).items():
        lines.append("| " + " | ".join([f"{name} (gold only)", t["metric"]] + [""] * (members + 2)
                                       + [fmt(t["student"]["score"])]) + " |")
    lines += ["", "Pairwise disagreement of the members on dev (classification: fraction of examples with a "
              "different predicted class; regression: mean absolute difference of the predictions).", ""]
    pairs = [f"{a}-{b}" for a in range(1, members + 1) for b in range(a + 1, members + 1)]
    lines += ["| task | " + " | ".join(pairs) + " |", "|" + "---|" * (len(pairs) + 1)]
    for name, t in tasks.items():
        values = {f"{p['members'][0]}-{p['members'][1]}": fmt(p["value"]) for p in t["disagreement"]["pairs"]}
        lines.append(f"| {name} | " + " | ".join(values.get(p, "") for p in pairs) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- the build


def read_manifest(teacher_dir: Path) -> dict:
    """The resolved spec of a teacher directory (``teachers.yaml``).

    Raises:
        CheckpointError: the directory holds no teacher build.
    """
    path = Path(teacher_dir) / MANIFEST_FILE
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError:
        raise CheckpointError(f"{path}: no teacher build here (build one with python -m mtdnn.teachers)") from None


def multitask_export(run: str | Path, where: str) -> Path:
    """The export of a complete multi-task run (or an export directory itself).

    Raises:
        CheckpointError: prefixed with ``where`` (the spec file and field): no such run, an unfinished run, or
            no export.
    """
    from .export import is_export_dir, resolve_export
    from .runs import complete_run

    try:
        if not is_export_dir(run):
            complete_run(run)  # says whether the run is missing or unfinished
        return resolve_export(run)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from None


def pretrained_encoder(run: Path) -> str:
    """The encoder a training run started from (its ``config.yaml``), else its export's source encoder."""
    from .export import EXPORT_META, resolve_export
    from .runs import CONFIG_FILE

    config = Path(run) / CONFIG_FILE
    if config.is_file():
        encoder = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("encoder")
        if encoder:
            return str(encoder)
    meta = json.loads((resolve_export(run) / EXPORT_META).read_text(encoding="utf-8"))
    return str(meta["source_encoder"])


def _inference_device(accelerator: str) -> str:
    return "cuda" if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available() else "cpu"


def _first_difference(stored: dict, wanted: dict, prefix: str = "") -> str | None:
    for key in sorted(set(stored) | set(wanted)):
        a, b = stored.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _first_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"field '{prefix}{key}': built with {a!r}, now {b!r}"
    return None


def trainer_flags(args: argparse.Namespace) -> list[str]:
    """The Lightning trainer flags of ``args`` (see :func:`mtdnn.train.add_trainer_args`), to pass on."""
    names = ("accelerator", "devices", "strategy", "num_nodes", "precision", "num_workers")
    flags = [part for n in names for part in (f"--{n.replace('_', '-')}", str(getattr(args, n)))]
    return flags + (["--compile"] if getattr(args, "compile", False) else [])


def build(spec: TeacherSpec, spec_path: str, data_dir: Path, from_run: str | None = None,
          output_dir: str | None = None, flags: list[str] | None = None, accelerator: str = "auto",
          retrain_changed: bool = False) -> tuple[int, Path]:
    """Build (or resume) the teacher ensembles of ``spec``; see the module docstring.

    Args:
        from_run: overrides ``spec.from_run``. output_dir: overrides ``spec.output_dir``.
        flags: Lightning trainer flags for the members' training runs.
        retrain_changed: retrain complete members whose settings, multi-task run or data changed (else an error).

    Returns:
        ``(exit code, teacher directory)``: 0, or the exit code of an interrupted member's training (130, 143).

    Raises:
        ConfigError, DataError, CheckpointError: bad spec, data or multi-task run, or complete members built
            differently (without ``retrain_changed``); nothing is written before these checks pass.
    """
    from . import train
    from .data import check_files, tokenizer_fingerprint
    from .model import load_tokenizer
    from .runs import read_metrics, write_atomic, write_json_atomic

    # 1. Validate everything before writing anything.
    all_tasks = load_task_defs(spec.task_defs)
    tasks = select_tasks(all_tasks, spec.tasks, f"{spec_path}: field 'tasks'")
    for name, task in tasks.items():
        missing = [s for s in ("train", "dev") if s not in task.splits]
        if missing:
            raise ConfigError(f"{spec_path}: field 'tasks': task '{name}' has no {' or '.join(missing)} split "
                              "(members are fine-tuned on train and selected on dev)")
    run = from_run or spec.from_run
    if not run:
        raise ConfigError(f"{spec_path}: field 'from_run': no multi-task run given (set it or pass --from-run)")
    run_path = Path(run).resolve()
    mt_export = multitask_export(run_path, f"{spec_path}: field 'from_run'" if not from_run else "--from-run")
    encoder = pretrained_encoder(run_path)
    teacher_dir = Path(output_dir or spec.output_dir)
    if run_path.is_relative_to(teacher_dir.resolve()):
        raise ConfigError(f"{spec_path}: field 'from_run': {run} is inside the teacher directory {teacher_dir}")
    for task in tasks.values():
        check_files(task, ["train", "dev"], data_dir)
    data = {n: {s: data_fingerprint(t, s, data_dir)["digest"] for s in ("train", "dev")} for n, t in tasks.items()}
    mt_digest = export_digest(mt_export)
    plan = []
    for name, task in tasks.items():
        for k, (seed, dropout) in enumerate(zip(spec.seeds, spec.dropouts), start=1):
            settings = {"task": name, "member": k, "seed": seed, "dropout": dropout, "from_run": str(run_path),
                        "from_run_export": mt_digest, "finetune": spec.finetune.model_dump(), "data": data[name]}
            run_dir = member_dir(teacher_dir, name, k)
            sidecar = run_dir.with_name(f"member-{k}.json")
            retrain = False
            if read_metrics(run_dir) is not None:
                stored = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else {}
                # the multi-task run is compared by its export's digest, so that a moved directory still matches
                difference = _first_difference({key: v for key, v in stored.items() if key != "from_run"},
                                               {key: v for key, v in settings.items() if key != "from_run"})
                if difference and not retrain_changed:
                    raise CheckpointError(f"{sidecar}: teacher member {k} of task '{name}' is complete but was built "
                                          f"differently ({difference}); pass --retrain-changed to retrain it, or "
                                          "choose another teacher directory")
                retrain = bool(difference)
            plan.append((task, k, seed, dropout, settings, run_dir, sidecar, retrain))

    # 2. The resolved spec, then each member: train (unless complete), then cache its outputs.
    manifest = {"spec": str(spec_path), "task_defs": str(Path(spec.task_defs).resolve()), "from_run": str(run_path),
                "encoder": encoder, "data_dir": str(data_dir), "finetune": spec.finetune.model_dump(),
                "tasks": {n: {"members": [{"member": k, "seed": s, "dropout": d}
                                          for k, (s, d) in enumerate(zip(spec.seeds, spec.dropouts), start=1)]}
                          for n in tasks}}
    write_atomic(teacher_dir / MANIFEST_FILE, yaml.safe_dump(manifest, sort_keys=False))
    device = _inference_device(accelerator)
    for task, k, seed, dropout, settings, run_dir, sidecar, retrain in plan:
        if read_metrics(run_dir) is None or retrain:
            write_json_atomic(sidecar, settings)
            log.info("teacher %s member %d: fine-tuning from %s (seed %d, dropout %s)", task.name, k, run_path, seed,
                     "as defined" if dropout is None else dropout)
            code = train.main([spec.task_defs, "--tasks", task.name, "--data-dir", str(data_dir), "--encoder", encoder,
                               "--init-from", str(run_path), "--output-dir", str(run_dir), "--seed", str(seed),
                               *([] if dropout is None else ["--dropout", str(dropout)]),
                               *spec.finetune.train_flags(), *(flags or []), *(["--overwrite"] if retrain else [])])
            gc.collect()  # the member's Trainer and model, before the next one is built
            if code:
                return code, teacher_dir
        else:
            log.info("teacher %s member %d: complete, reused (%s)", task.name, k, run_dir)
        export = run_dir / "export"
        member_fp = {"version": CACHE_VERSION, "member_export": export_digest(export),
                     "tokenizer": tokenizer_fingerprint(load_tokenizer(str(export / "encoder"))),
                     "max_length": spec.finetune.max_length}
        for split in ("train", "dev"):
            path = logits_dir(teacher_dir, task.name, k, split)
            wanted = {**member_fp, "data": data[task.name][split]}
            stored = read_fingerprint(path)
            if stored is not None and all(stored.get(key) == v for key, v in wanted.items()):
                continue  # cached outputs of this member on this data: reused
            log.info("teacher %s member %d: outputs on %s", task.name, k, split)
            ids, outputs = member_outputs(export, task.name, split, data_dir, spec.finetune.eval_batch_size,
                                          spec.finetune.max_length, device)
            write_outputs(path, ids, outputs, {**wanted, "task": task.name, "split": split, "member": k,
                                               "count": len(ids)})

    # 3. Members' and ensemble's dev scores, disagreement.
    report = summarize(teacher_dir, tasks, data_dir)
    write_json_atomic(teacher_dir / SUMMARY_JSON, report)
    write_atomic(teacher_dir / SUMMARY_MD, render_markdown(report, f"Teachers: {teacher_dir}"))
    return 0, teacher_dir


# ----------------------------------------------------------------------------------------------------- command


def build_parser() -> argparse.ArgumentParser:
    from .train import add_trainer_args

    p = argparse.ArgumentParser(prog="python -m mtdnn.teachers",
                                description="Fine-tune per-task teacher ensembles from a multi-task run and cache "
                                            "their outputs (MT-DNN-KD).")
    p.add_argument("spec", help="teacher spec YAML (e.g. teachers/glue.yaml)")
    add_common_args(p)
    add_trainer_args(p)
    p.set_defaults(devices="1")
    return p


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-run", default=None, help="the multi-task run the members start from (overrides from_run)")
    p.add_argument("--data-dir", default=None,
                   help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--teachers-dir", default=None, help="teacher directory (overrides the spec's output_dir)")
    p.add_argument("--retrain-changed", action="store_true",
                   help="retrain complete members whose settings, multi-task run or data changed (default: error)")


def main(argv: list[str] | None = None) -> int:
    from .data import resolve_data_dir

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from .train import check_trainer_flags

    spec = load_spec(args.spec, TeacherSpec, "teacher")
    check_trainer_flags(args)  # a bad Lightning flag fails here, not in the first member's run
    try:
        code, teacher_dir = build(spec, args.spec, resolve_data_dir(args.data_dir), args.from_run, args.teachers_dir,
                                  trainer_flags(args), args.accelerator, args.retrain_changed)
    except KeyboardInterrupt:
        code, teacher_dir = 130, Path(args.teachers_dir or spec.output_dir)
    if code:
        print(f"interrupted: rerun the same command to resume (complete members in {teacher_dir} are kept)",
              file=sys.stderr)
        return code
    print((teacher_dir / SUMMARY_MD).read_text(encoding="utf-8"))
    print(f"teacher directory: {teacher_dir}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-teachers``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
