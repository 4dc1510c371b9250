"""The teacher directory's cached outputs (soft-target sources) of MT-DNN-KD (arXiv 1904.09482): layout,
fingerprints, atomic writes, reads checked against the data, and alignment by example id.

Each member's float32 logits (regression: predictions) over a split are a ``datasets.Dataset`` of ``id`` and
``logits`` in ``<teacher_dir>/<task>/logits/member-<k>-<split>/`` with ``fingerprint.json`` (data digest and row
count, tokenizer, the member's export digest). Readers never trust row order: :func:`align` maps by id, and any
difference in count, ids or fingerprint is a :class:`~mtdnn.errors.CheckpointError`.

The shape of a row is the task type's (:mod:`mtdnn.tasks.types`): ``output_width`` values per example, or, for a
type with ``soft_target_pieces`` (sequence labelling, span extraction), one row per row of the tokenized split (a
sentence, a QA window ``<question id>#<window>``) holding ``(pieces, output_width)`` logits flattened, with the
columns ``pieces`` (the count) and ``mask`` (the label mask), and ``shape: piece`` and ``pieces`` (the digest of
the split's pieces) in the fingerprint (:mod:`mtdnn.distillation.pieces`). What a student's batch takes from the
aligned rows is :mod:`mtdnn.distillation.batch_targets`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from ..errors import CheckpointError
from ..fileio import default_mode, make_dir, read_json, read_yaml, tree_digest, write_json_atomic
from ..tasks.data import load_split
from ..tasks.tokenized import tokenized_split
from ..tasks.taskdef import TaskDef
from ..training.export import load_export
from ..training.inference import predict_outputs
from .folds import FOLD_SPLIT, fold_task
from .pieces import PieceOutputs, pieces_digest, piece_outputs

MANIFEST_FILE = "teachers.yaml"
FINGERPRINT_FILE = "fingerprint.json"
CACHE_VERSION = 1


def read_manifest(teacher_dir: Path) -> dict:
    """The resolved spec of a teacher directory (``teachers.yaml``, written by the teacher build).

    Raises:
        CheckpointError: the directory holds no teacher build, or its ``teachers.yaml`` is damaged or is not a
            build manifest (for example a teacher spec copied there).
    """
    path = Path(teacher_dir) / MANIFEST_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: no teacher build here (build one with python -m mtdnn.teachers)")
    manifest = read_yaml(path, CheckpointError, "teacher build manifest")
    tasks = manifest.get("tasks") if isinstance(manifest, dict) else None
    well_formed = (isinstance(tasks, dict) and "from_run" in manifest and all(
        isinstance(t, dict) and isinstance(t.get("members"), list) and t["members"]
        and all(isinstance(m, dict) and isinstance(m.get("member"), int) for m in t["members"])
        for t in tasks.values()))
    if not well_formed:
        raise CheckpointError(f"{path}: not a teacher build manifest (expected 'from_run' and 'tasks' mapping each "
                              "task to its 'members', as python -m mtdnn.teachers writes it; a teacher spec is "
                              "given to python -m mtdnn.teachers, not placed in the teacher directory)")
    return manifest


# ----------------------------------------------------------------------------------------------- fingerprints


def data_fingerprint(task: TaskDef, split: str, data_dir: Path) -> dict:
    """``{"digest", "count"}`` of one split: a hash of the rows' source (file bytes, carving) and the parsing rules
    that give examples their ids, texts and labels (as in the tokenized-split cache key of :mod:`mtdnn.tasks.data`).

    Raises:
        DataError: see :func:`mtdnn.tasks.data.load_split`.
    """
    raw = load_split(task, split, data_dir)
    rules = {k: v for k, v in task.to_plain().items()
             if k in ("type", "text", "candidates", "label", "labels", "on_malformed", "drop_labels")}
    rules["split"] = task.splits[split].model_dump(mode="json")
    payload = json.dumps({"source": raw.digest, "rules": rules, "ids": [ex.id for ex in raw.examples]}, sort_keys=True)
    return {"digest": hashlib.sha256(payload.encode()).hexdigest()[:24], "count": len(raw.examples)}


def export_digest(export_dir: Path) -> str:
    """A hash of every file of an export (encoder weights and config, tokenizer, heads, task definitions,
    metadata): :func:`mtdnn.fileio.tree_digest`, which teacher members record of their exports.

    Remembered per process while no file's size or modification time changes.
    """
    return tree_digest(export_dir)


def num_outputs(task: TaskDef) -> int:
    """Outputs per example, the soft targets' width: classes (classification), candidates (ranking),
    1 (regression); per piece for per-piece types: tags, 2 (start, end); the type's ``output_width``."""
    return task.output_width


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
        regression: predictions, ``outputs = 1``; ranking: candidate scores), or for a type with per-piece soft
        targets the rows' ids (windows: ``<question id>#<window>``) and their
        :class:`~mtdnn.distillation.pieces.PieceOutputs`.
    """
    model, tokenizer, tasks = load_export(export_dir)  # in eval mode
    task = tasks[task_name]
    rows = tokenized_split(task, split, data_dir, tokenizer, max_length)
    if task.kind.soft_target_pieces is not None:
        return list(rows.ids), piece_outputs(model.to(device), task, rows, tokenizer.pad_token_id or 0, batch_size,
                                             device)
    outputs = predict_outputs(model.to(device), task, rows, tokenizer.pad_token_id or 0, batch_size, device=device)
    return list(rows.ids), outputs.reshape(len(rows), -1).numpy().astype(np.float32)


def write_outputs(path: Path, ids: list[str], outputs: np.ndarray | PieceOutputs, fingerprint: dict) -> None:
    """Save ``(id, logits)`` rows with ``datasets`` and ``fingerprint.json`` to a temporary directory, then
    rename it into place (a reader sees the old cache or the new one, never half of one). Per-piece outputs
    (:class:`~mtdnn.distillation.pieces.PieceOutputs`) also get the ``pieces`` and ``mask`` columns."""
    if isinstance(outputs, PieceOutputs):
        features = datasets.Features({"id": datasets.Value("string"), "pieces": datasets.Value("int32"),
                                      "logits": datasets.List(datasets.Value("float32")),
                                      "mask": datasets.List(datasets.Value("int8"))})
        ds = datasets.Dataset.from_dict({"id": ids, "pieces": [len(r) for r in outputs.rows],
                                         "logits": [r.reshape(-1) for r in outputs.rows], "mask": outputs.masks},
                                        features=features)
        fingerprint = {**fingerprint, "shape": "piece", "width": int(outputs.rows[0].shape[1]) if outputs.rows else 0,
                       "pieces": outputs.pieces}
    else:
        features = datasets.Features({"id": datasets.Value("string"),
                                      "logits": datasets.List(datasets.Value("float32"), length=outputs.shape[1])})
        ds = datasets.Dataset.from_dict({"id": ids, "logits": outputs}, features=features)
    make_dir(path.parent)
    # .<name>.<pid>.<random>: a rerun of the teacher build removes it if this process is killed while writing
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", dir=path.parent))
    os.chmod(tmp, default_mode(directory=True))  # mkdtemp gives 0700
    try:
        ds.save_to_disk(str(tmp))
        write_json_atomic(tmp / FINGERPRINT_FILE, fingerprint)
        old = path.with_name(f".{path.name}.{os.getpid()}.replaced")
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
        stored = read_json(Path(path) / FINGERPRINT_FILE, CheckpointError, "cache fingerprint")
    except CheckpointError:
        return None
    return stored if isinstance(stored, dict) else None


def member_fingerprints(teacher_dir: Path, task: TaskDef) -> dict[str, dict]:
    """``{member export's encoder directory: fingerprint of its cached train outputs}`` of every member of
    ``task`` in the teacher directory's manifest (members without a cache are left out; reading their outputs fails
    later with its own error).

    Raises:
        CheckpointError: see :func:`read_manifest`.
    """
    found = {}
    for member in read_manifest(teacher_dir)["tasks"].get(task.name, {}).get("members", []):
        stored = read_fingerprint(logits_dir(teacher_dir, task.name, member["member"], "train"))
        if stored is not None:
            found[str(member_dir(teacher_dir, task.name, member["member"]) / "export" / "encoder")] = stored
    return found


def read_outputs(path: Path) -> tuple[list[str], np.ndarray | PieceOutputs, dict]:
    """``(ids, outputs (examples, outputs) float32, fingerprint)`` of a cache written by :func:`write_outputs`;
    per-piece caches give :class:`~mtdnn.distillation.pieces.PieceOutputs` as outputs.

    Raises:
        CheckpointError: the cache is missing or damaged.
    """
    fingerprint = read_fingerprint(path)
    if fingerprint is None:
        raise CheckpointError(f"{path}: cached teacher outputs not found (no {FINGERPRINT_FILE}); "
                              "build them with python -m mtdnn.teachers")
    try:
        ds = datasets.load_from_disk(str(path))
        if fingerprint.get("shape") == "piece":
            columns = ds.with_format("numpy")[:]
            width = int(fingerprint["width"])
            rows = [np.array(r, dtype=np.float32).reshape(-1, width) for r in columns["logits"]]  # writable copies
            outputs = PieceOutputs(rows, [np.asarray(m).tolist() for m in columns["mask"]], fingerprint["pieces"])
            return [str(i) for i in columns["id"]], outputs, fingerprint
        columns = ds.with_format("numpy")[:]
    except Exception as err:  # datasets raises many types for a damaged directory
        raise CheckpointError(f"{path}: cannot read the cached teacher outputs ({err})") from None
    return [str(i) for i in columns["id"]], np.asarray(columns["logits"], dtype=np.float32), fingerprint


def align(cached_ids: list[str], outputs: np.ndarray | list, ids: list[str], source: str) -> np.ndarray | list:
    """Rows of ``outputs`` (keyed by ``cached_ids``; an array, or a list of per-piece rows) in the order of ``ids``
    (which may be a subset).

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
    if isinstance(outputs, list):
        return [outputs[position[i]] for i in ids]
    return outputs[[position[i] for i in ids]]


def teacher_outputs(teacher_dir: Path, task: TaskDef, split: str, data_dir: Path, ids: list[str],
                    fingerprint: dict | None = None, rows=None) -> np.ndarray | list[np.ndarray]:
    """Every member's cached outputs for ``ids`` of a split, checked against the data and the members' exports.

    Args:
        fingerprint: :func:`data_fingerprint` of the split (computed when None).
        rows: per-piece types: the reader's tokenized split, whose pieces and label masks the cache must have
            (row ids ``ids``).

    Returns:
        ``(len(ids), members, outputs)`` float32; per-piece types: per id, ``(members, pieces, width)`` float32.
        For the ``train`` split of a cross-fitted build (``cross_fit: K``), ``members`` is the number per fold and
        each example's row holds the outputs of the members of its own fold, which never trained on it; on other
        splits, every member of every fold.

    Raises:
        CheckpointError: no teachers for the task, a member's run, export or cache is missing, or a cache was
            computed from other data (count, ids, fingerprint) or another version of the member.
    """
    manifest = read_manifest(teacher_dir)
    manifest_path = Path(teacher_dir) / MANIFEST_FILE
    if task.name not in manifest["tasks"]:
        raise CheckpointError(f"{manifest_path}: no teachers for task '{task.name}' (teachers were built for "
                              f"{', '.join(manifest['tasks'])}); build them, or train the task on gold labels only")
    members = manifest["tasks"][task.name]["members"]
    cross_fit = manifest.get("cross_fit")
    per_piece = task.kind.soft_target_pieces is not None
    if cross_fit and split == "train":
        if per_piece:
            raise CheckpointError(f"{manifest_path}: task '{task.name}' is a {task.type} task, whose per-piece soft "
                                  "targets have no out-of-fold build (cross_fit)")
        return _out_of_fold_outputs(teacher_dir, task, data_dir, ids, members, cross_fit)
    fingerprint = fingerprint or data_fingerprint(task, split, data_dir)
    if per_piece and rows is None:
        raise ValueError(f"task '{task.name}': per-piece soft targets are read with the tokenized split (rows)")
    count = len(rows) if per_piece else fingerprint["count"]  # rows of the tokenized split: sentences, windows
    stacked = []
    for member in members:
        k = member["member"]
        cached_ids, outputs, stored, where = _member_cache(teacher_dir, task, k, split, fingerprint, count)
        if per_piece:
            stacked.append(_piece_rows(cached_ids, outputs, stored, task, ids, rows, where))
            continue
        _check_width(outputs, task, where)
        stacked.append(align(cached_ids, outputs, ids, str(where.parent)))
    if per_piece:
        return [np.stack(member_rows) for member_rows in zip(*stacked)]
    return np.stack(stacked, axis=1)


def _member_cache(teacher_dir: Path, task: TaskDef, k: int, split: str, fingerprint: dict,
                  count: int | None = None) -> tuple[list[str], Any, dict, Path]:
    """Member k's cached ``(ids, outputs, fingerprint record, record path)`` on ``split``, checked against
    ``fingerprint`` (the data; ``count`` rows, by default the data's) and the member's export."""
    count = fingerprint["count"] if count is None else count
    export = member_dir(teacher_dir, task.name, k) / "export"
    if not (export / "heads.safetensors").is_file():
        raise CheckpointError(f"{export}: checkpoint of teacher member {k} of task '{task.name}' not found "
                              "(the teacher build is incomplete; rerun python -m mtdnn.teachers)")
    path = logits_dir(teacher_dir, task.name, k, split)
    cached_ids, outputs, stored = read_outputs(path)
    where = path / FINGERPRINT_FILE
    if stored.get("data") != fingerprint["digest"] or len(cached_ids) != count:
        raise CheckpointError(
            f"{where}: field 'data': the cached outputs of task '{task.name}' ({split}, member {k}) were computed "
            f"from another version of the data ({len(cached_ids)} rows, digest {stored.get('data')}; the data "
            f"now has {count} rows, digest {fingerprint['digest']}); rebuild the teachers")
    if stored.get("member_export") != export_digest(export):
        raise CheckpointError(f"{where}: field 'member_export': teacher member {k} of task '{task.name}' changed "
                              f"since its outputs were cached; rerun python -m mtdnn.teachers")
    return cached_ids, outputs, stored, where


def _check_width(outputs: np.ndarray, task: TaskDef, where: Path) -> None:
    if outputs.shape[1] != num_outputs(task):
        raise CheckpointError(f"{where}: {outputs.shape[1]} outputs per example, task '{task.name}' has "
                              f"{num_outputs(task)}")


def _piece_rows(cached_ids: list[str], outputs, stored: dict, task: TaskDef, ids: list[str], rows,
                where: Path) -> list[np.ndarray]:
    """One member's per-piece rows for ``ids``, checked: a per-piece cache of the task's width, computed on the
    pieces of ``rows`` (the reader's tokenized split, row ids ``ids``) with the same label masks."""
    if not isinstance(outputs, PieceOutputs) or stored.get("width") != num_outputs(task):
        raise CheckpointError(f"{where}: not per-piece outputs of width {num_outputs(task)} (task '{task.name}' is "
                              f"a {task.type} task); rebuild the teachers")
    if stored.get("pieces") != pieces_digest(rows):
        raise CheckpointError(f"{where}: field 'pieces': the cached outputs of task '{task.name}' were computed "
                              "on other word pieces (another tokenizer, max_length or doc_stride)")
    if align(cached_ids, outputs.masks, ids, str(where.parent)) != task.kind.soft_target_pieces.mask(rows):
        raise CheckpointError(f"{where}: the cached label masks of task '{task.name}' differ from the data's")
    return align(cached_ids, outputs.rows, ids, str(where.parent))


def _out_of_fold_outputs(teacher_dir: Path, task: TaskDef, data_dir: Path, ids: list[str], members: list[dict],
                         cross_fit: dict) -> np.ndarray:
    """``(len(ids), members per fold, outputs)``: each example's outputs from the members of its own fold only
    (trained without it). Raises CheckpointError when an id is in no fold's cache or in more than one."""
    by_fold: dict[int, list[int]] = {}
    for member in members:
        by_fold.setdefault(int(member["fold"]), []).append(int(member["member"]))
    fold_of: dict[str, int] = {}
    caches: dict[int, list[tuple[list[str], np.ndarray]]] = {}
    for fold, ks in sorted(by_fold.items()):
        fingerprint = data_fingerprint(fold_task(task, cross_fit["k"], fold, cross_fit["seed"]), FOLD_SPLIT, data_dir)
        caches[fold] = []
        for k in ks:
            cached_ids, outputs, _, where = _member_cache(teacher_dir, task, k, "train", fingerprint)
            _check_width(outputs, task, where)
            caches[fold].append((cached_ids, outputs))
        for i in caches[fold][0][0]:
            if fold_of.setdefault(i, fold) != fold:
                raise CheckpointError(f"{teacher_dir}: example id {i} of task '{task.name}' is in folds {fold_of[i]} "
                                      f"and {fold}; the folds must partition the training set")
    missing = [i for i in ids if i not in fold_of]
    if missing:
        raise CheckpointError(f"{teacher_dir}: {len(missing)} training example id(s) of task '{task.name}' are in no "
                              f"fold's cached outputs (e.g. {missing[:3]}); rebuild the teachers")
    per_fold = len(next(iter(caches.values())))
    out = np.zeros((len(ids), per_fold, num_outputs(task)), dtype=np.float32)
    for fold, fold_caches in caches.items():
        rows = [j for j, i in enumerate(ids) if fold_of[i] == fold]
        if rows:
            wanted = [ids[j] for j in rows]
            out[rows] = np.stack([align(cached, outputs, wanted, f"{teacher_dir} (fold {fold})")
                                  for cached, outputs in fold_caches], axis=1)
    return out
