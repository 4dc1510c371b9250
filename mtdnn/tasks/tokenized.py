"""Tokenization and the tokenized-split cache: a split's examples -> a tokenized ``datasets.Dataset`` saved under
the cache directory, keyed by the file's bytes, the parsing rules, the tokenizer and the max length ->
:class:`TokenizedSplit`, the in-memory form that loaders index."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import datasets
import torch

from ..errors import ConfigError, DataError, UserError
from ..fileio import default_mode, file_digests, make_dir, read_json, write_json_atomic
from .data import CACHE_DIR_ENV, CACHE_RECORD, CACHE_VERSION, RawSplit, cache_dir, load_split  # noqa: F401
from .reading import _source_digest
from .rows import LABELLED_SPLITS, Example
from .taskdef import SplitSpec, TaskDef

log = logging.getLogger("mtdnn.tasks.data")



def check_max_length(task: TaskDef, tokenizer, max_length: int | None, source: str) -> None:
    """Refuse a max length the tokenizer cannot truncate the task's inputs to (a fast tokenizer then returns a
    pair whole, and a long pair overflows the position embeddings).

    Args:
        max_length: the override (``--max-length``); None checks the task's own ``max_length``.
        source: where the value comes from, for the message (``--max-length``, a spec file and field).

    Raises:
        ConfigError: ``max_length`` leaves no room for the special tokens and one token of each text, or (span
            extraction) for a window's ``qa.doc_stride`` (the type's :meth:`~mtdnn.tasks.types.TaskKind.check_max_length`).
    """

    pair = task.kind.encodes_pairs(task)
    needed = tokenizer.num_special_tokens_to_add(pair=pair) + (2 if pair else 1)
    value = max_length or task.max_length
    if value < needed:
        raise ConfigError(f"{source}: max length {value} is too short for task '{task.name}': the tokenizer needs "
                          f"at least {needed} tokens to truncate {'a pair' if pair else 'a text'} "
                          f"({needed - (2 if pair else 1)} special tokens and one token of each text)")
    task.kind.check_max_length(task, value, source)


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's full definition (vocabulary, normalisation, special tokens).

    The fast tokenizer's ``truncation`` and ``padding`` settings are left out: they are state left over from
    its last call (a call with ``max_length=64`` leaves 64 there), not part of its definition; the max length
    is part of the cache key by itself.
    """
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        h.update(json.dumps(definition, sort_keys=True).encode())
    else:
        h.update(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode())
    h.update(json.dumps(list(tokenizer.model_input_names)).encode())
    return h.hexdigest()[:16]


@dataclass
class TokenizedSplit(torch.utils.data.Dataset):
    """A tokenized split in memory. Item ``i`` is a dict of python lists (one row of the batch to be).

    ``input_ids[i]`` is ``list[int]`` (length <= max_length); for ranking tasks it is a list of
    ``num_candidates`` such sequences. ``lengths[i]`` is the (longest) sequence length in tokens.
    ``labels`` is None for an unlabelled split. ``features`` holds the task type's own per-example columns
    (e.g. ``sequence_ids`` for a SAN head), which items carry under the same names. ``padding_side`` is the
    tokenizer's (``left`` for XLNet), for :func:`collate`.
    """

    task: str
    split: str
    ids: list[str]
    input_ids: list
    token_type_ids: list | None
    labels: list | None
    lengths: list[int]
    features: dict[str, list] = field(default_factory=dict)
    padding_side: str = "right"

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, key: int | tuple[int, float]) -> dict[str, Any]:
        """Row ``key``, or ``(row, weight)``: the row with that example weight (0: padding, see
        :class:`~mtdnn.tasks.schedule.EvalBatchSampler`)."""
        i, weight = key if isinstance(key, tuple) else (key, None)
        item = {"idx": i, "input_ids": self.input_ids[i]}
        if weight is not None:
            item["weight"] = weight
        if self.token_type_ids is not None:
            item["token_type_ids"] = self.token_type_ids[i]
        if self.labels is not None:
            item["label"] = self.labels[i]
        for name, column in self.features.items():
            item[name] = column[i]
        return item

    @property
    def num_examples(self) -> int:
        """Examples in the split: rows, or for a windowed split (span extraction: rows that share an
        ``example_id``) its questions."""
        groups = self.features.get("example_id")
        return len(self) if groups is None else len(set(groups))

    def head(self, n: int) -> "TokenizedSplit":
        """The first ``n`` examples (``--limit-train-examples``, ``--limit-eval-examples``): rows, or for a
        windowed split every window of its first ``n`` questions, so that no question is scored on part of its
        windows."""
        groups = self.features.get("example_id")
        if groups is None:
            return self.subset(range(min(n, len(self))))
        first = list(dict.fromkeys(groups))[:n]
        kept = set(first)
        return self.subset([i for i, g in enumerate(groups) if g in kept])

    def subset(self, positions: Sequence[int]) -> "TokenizedSplit":
        """The rows at ``positions``, in that order."""
        pick = lambda seq: None if seq is None else [seq[i] for i in positions]  # noqa: E731
        return TokenizedSplit(self.task, self.split, pick(self.ids), pick(self.input_ids), pick(self.token_type_ids),
                              pick(self.labels), pick(self.lengths), {k: pick(v) for k, v in self.features.items()},
                              self.padding_side)

    @classmethod
    def from_columns(cls, task: str, split: str, columns: dict[str, list],
                     padding_side: str = "right") -> "TokenizedSplit":
        """From the columns of :func:`_tokenize` (or the cached dataset): ``id``, ``input_ids``, ``length``,
        optional ``token_type_ids`` and ``label``; any other column is a feature."""
        known = {"id", "input_ids", "length", "token_type_ids", "label"}
        return cls(task=task, split=split, ids=columns["id"], input_ids=columns["input_ids"],
                   token_type_ids=columns.get("token_type_ids"), labels=columns.get("label"),
                   lengths=columns["length"], features={k: v for k, v in columns.items() if k not in known},
                   padding_side=padding_side)


def _tokenize(raw: RawSplit, task: TaskDef, tokenizer, max_length: int) -> dict[str, list]:
    """The type's tokenization (:meth:`mtdnn.tasks.types.TaskKind.tokenize`) plus the ``id`` and ``label`` columns."""
    exs = raw.examples
    columns = {"id": [ex.id for ex in exs], **task.kind.tokenize(exs, task, tokenizer, max_length)}
    # (a type that packs several examples into one sequence, mlm, gives its own "id" column)
    if raw.labelled:
        columns["label"] = [ex.label for ex in exs]
    return columns


def tokenize_examples(examples: Sequence[Example], task: TaskDef, tokenizer, max_length: int | None = None,
                      split: str = "input") -> TokenizedSplit:
    """Tokenize already parsed examples (raw text given to ``mtdnn.predict``) exactly as files are, uncached.

    ``max_length`` defaults to the task's. ``split`` only names the result.
    """
    raw = RawSplit(task.name, split, split, "", list(examples))
    return TokenizedSplit.from_columns(task.name, split, _tokenize(raw, task, tokenizer, max_length or task.max_length),
                                       tokenizer.padding_side)


def _cache_key(digest: str, task: TaskDef, split: str, tokenizer, max_length: int) -> str:
    rules = task.to_plain()
    parse_rules = {k: rules.get(k) for k in ("type", "text", "candidates", "label", "labels", "on_malformed")}
    parse_rules["splits"] = {k: v.model_dump(mode="json") for k, v in task.splits.items()}
    if task.drop_labels:  # only when set, so that other tasks keep their cache keys
        parse_rules["drop_labels"] = task.drop_labels
    if task.head.type:  # a head may need its own columns (SAN: sequence_ids); only when set, as above
        parse_rules["head"] = task.head.type
    parse_rules.update(task.kind.cache_rules(task))  # span extraction: the windows depend on the stride
    payload = json.dumps({"v": CACHE_VERSION, "digest": digest, "rules": parse_rules, "max_length": max_length,
                          "tokenizer": tokenizer_fingerprint(tokenizer)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _ids_digest(ids: Sequence) -> str:
    return hashlib.sha256(json.dumps([str(i) for i in ids]).encode()).hexdigest()


def _cache_record(ds, key: str, task: str, split: str) -> dict:
    """What a cache entry records of itself besides its files' digests (see :data:`CACHE_RECORD`)."""
    ids = ds["id"] if "id" in ds.column_names else []
    return {"version": CACHE_VERSION, "key": key, "task": task, "split": split, "rows": ds.num_rows,
            "ids": _ids_digest(ids)}


def _write_cache(ds, path: Path, key: str, task: str, split: str) -> None:
    """Save a tokenized split to ``path`` through a temporary directory renamed into place, with its record
    (:data:`CACHE_RECORD`: key, task, split, row count, row ids' digest, each file's SHA-256).

    Raises:
        UserError: the cache directory cannot be written (naming it and ``$MTDNN_CACHE_DIR``).
    """

    try:
        make_dir(path.parent)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    except (OSError, UserError) as err:
        raise UserError(f"{path.parent}: cannot write the tokenized-split cache ({getattr(err, 'strerror', err)}); "
                        f"set ${CACHE_DIR_ENV} to a writable directory") from None
    try:
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp gives 0700
        ds.save_to_disk(str(tmp))
        record = {**_cache_record(ds, key, task, split), "files": file_digests(tmp)}
        write_json_atomic(tmp / CACHE_RECORD, record)
    except (OSError, UserError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{path.parent}: cannot write the tokenized-split cache ({getattr(err, 'strerror', err)}); "
                        f"set ${CACHE_DIR_ENV} to a writable directory") from None
    try:
        os.replace(tmp, path)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cache(path: Path, key: str, task: str, split: str):
    """The cached dataset at ``path`` when every part of it is the one its record names, else None (after a
    warning naming what differs; the caller rebuilds the entry). An entry without a record (written before
    records existed) is rebuilt."""

    def stale(why: str):
        log.warning("%s: tokenized-split cache entry rebuilt: %s", path, why)
        return None

    try:
        record = read_json(path / CACHE_RECORD, UserError, "cache record")
    except UserError:
        return stale(f"no readable {CACHE_RECORD} (written by an older version, or damaged)")
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return stale(f"{CACHE_RECORD} is damaged")
    for name, wanted in (("version", CACHE_VERSION), ("key", key), ("task", task), ("split", split)):
        if record.get(name) != wanted:
            return stale(f"{CACHE_RECORD}: field '{name}' is {record.get(name)!r}, expected {wanted!r} (the entry "
                         "belongs to another split or version)")
    try:
        found = file_digests(path, exclude=(CACHE_RECORD,))
    except UserError as err:
        return stale(str(err))
    for name in sorted(set(found) | set(record["files"])):
        if found.get(name) != record["files"].get(name):
            what = "missing" if name not in found else "not recorded" if name not in record["files"] else \
                "does not match its recorded digest"
            return stale(f"file {name} {what}")
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as err:  # a damaged cache entry is rebuilt
        return stale(f"cannot be read ({type(err).__name__})")
    mine = _cache_record(ds, key, task, split)
    for name in ("rows", "ids"):
        if mine[name] != record.get(name):
            return stale(f"its {'row count' if name == 'rows' else 'row ids'} differ from the record's")
    return ds


def tokenized_split(task: TaskDef, split: str, data_dir: Path, tokenizer, max_length: int | None = None,
                    use_cache: bool = True) -> TokenizedSplit:
    """Parse (see :func:`load_split`), tokenize and cache one split; reuse the cache when nothing changed.

    Pairs are tokenized as ``tokenizer(text_a, text_b)`` (segment ids where the tokenizer has them),
    truncated to ``max_length`` (default: the task's). The cache key covers the file's bytes, the parsing
    rules, the tokenizer and the max length, so editing any of them re-tokenizes. Cache entries are written
    to a temporary directory and renamed into place, with a record of their key, task, split, row count, row ids'
    digest and each file's SHA-256; an entry that does not match its record (another split's entry put in its
    place, bytes changed, an entry of an older version) is rebuilt.

    Raises:
        DataError: see :func:`load_split`.
    """

    max_length = max_length or task.max_length
    if split not in task.splits:
        raise DataError(f"task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
    digest = _source_digest(task, split, data_dir)
    raw = load_split(task, split, data_dir) if digest is None else None
    key = _cache_key(digest or raw.digest, task, split, tokenizer, max_length)
    path = cache_dir() / "tokenized" / f"{task.name}-{split}-{key}"
    ds = None
    if use_cache and path.is_dir():
        ds = _read_cache(path, key, task.name, split)
        if ds is None:
            shutil.rmtree(path, ignore_errors=True)
    if ds is None:
        raw = raw or load_split(task, split, data_dir)
        ds = datasets.Dataset.from_dict(_tokenize(raw, task, tokenizer, max_length))
        if use_cache:
            _write_cache(ds, path, key, task.name, split)
    return TokenizedSplit.from_columns(task.name, split, ds.to_dict(), tokenizer.padding_side)
