"""Data: a task's splits as parsed rows: the data root, loading a split (read, carved, folded), the checks of its files.

Flow for one (task, split): file (tsv/csv/jsonl under the data root, a ``datasets`` hub id, or a split carved
from another) -> :class:`Example` rows with parsed labels -> tokenized ``datasets.Dataset`` saved under the
cache directory, keyed by the file's bytes, the parsing rules, the tokenizer and the max length ->
:class:`TokenizedSplit`, the in-memory form that loaders index.

Files are parsed with Python's ``csv`` module rather than pandas: every field stays a string ("NA" and "n/a"
are text, not missing values), ``quoting: none`` keeps stray ``"`` characters of GLUE tsv files, CRLF line ends,
a UTF-8 BOM and trailing blank lines load correctly, and each row keeps its 1-based physical line number so a
malformed row can be named exactly. ``datasets`` stores and memory-maps the tokenized result.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from ..errors import ConfigError, DataError
from .reading import (  # noqa: F401 - torch-free there (resolve_data_dir, check_files); re-exported for callers
    DATA_DIR_ENV,
    _build_examples,
    _file_digest,
    _file_path,
    _read_hub,
    _read_table,
    _source_digest,
    check_files,
    resolve_data_dir,
)
from .rows import Example
from .subsets import fold_assignment
from .taskdef import TaskDef

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "MTDNN_CACHE_DIR"
CACHE_VERSION = 2
"""The tokenized-split cache key's version: bumped by any change to how files are parsed (2: lines end only at
``\\n``, ``\\r\\n`` or a lone ``\\r``; non-string JSON text fields refused; one number grammar for labels)."""
CACHE_RECORD = "mtdnn_cache.json"
"""The record of a tokenized-split cache entry: its key, task, split, row count, row ids' digest and the SHA-256
of each of its files, checked when the entry is read (a mismatch rebuilds it)."""


def cache_dir() -> Path:
    """Where tokenized splits are cached: ``$MTDNN_CACHE_DIR`` or ``~/.cache/mtdnn`` (never beside the data)."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "mtdnn").expanduser()


@dataclass
class RawSplit:
    """The parsed rows of one split and where they came from (``source`` for messages, ``digest`` for caching).

    ``dropped``: rows of the source file removed because their label is one of the task's ``drop_labels``.
    """

    task: str
    split: str
    source: str
    digest: str
    examples: list[Example] = field(default_factory=list)
    dropped: int = 0

    @property
    def labelled(self) -> bool:
        return bool(self.examples) and self.examples[0].label is not None


def split_fingerprint(task: TaskDef, split: str, data_dir: Path) -> str:
    """A digest of a split's rows as read from the data root (file bytes and carving; a hub split's rows), the
    same wherever the data lies. ``--resume`` compares it with the interrupted run's.

    Raises:
        DataError: the split cannot be read (see :func:`load_split`).
    """
    digest = _source_digest(task, split, data_dir) or load_split(task, split, data_dir).digest
    return hashlib.sha256(digest.encode()).hexdigest()[:24]


def _read_source(task: TaskDef, split: str, data_dir: Path) -> RawSplit:
    spec = task.splits[split]
    if spec.hub is not None:
        columns, rows, digest = _read_hub(spec)
        source = f"hub:{spec.hub.path}"
    else:
        path = _file_path(task, split, data_dir)
        source, digest = str(path), _file_digest(path)
        if task.kind.read_file is not None:  # conll, squad: whole files (mtdnn.tasktypes.tagging, .spans)
            return RawSplit(task.name, split, source, digest, task.kind.read_file(task, split, path))
        columns, rows = _read_table(path, spec)
    dropped: list[int] = []
    examples = _build_examples(task, split, source, columns, rows, dropped)
    if dropped:
        log.info("%s: task '%s', split '%s': dropped %d rows whose label is one of %s",
                 source, task.name, split, len(dropped), task.drop_labels)
    return RawSplit(task.name, split, source, digest, examples, dropped=len(dropped))


def _carve(examples: list, carve, source: str, task: str) -> list[int]:
    """Positions of the examples a carve takes: rows of a seeded permutation, or (``by: article``) every question
    of the first ``size`` articles of a seeded permutation of a SQuAD file's articles."""
    if carve.by == "row":
        return _carved_positions(len(examples), carve.size, carve.seed, source, task)
    articles = max(ex.article for ex in examples) + 1
    try:
        chosen = set(carve_articles(articles, carve.size, carve.seed))
    except DataError as err:
        raise DataError(f"{source}: task '{task}', {err}") from None
    return [i for i, ex in enumerate(examples) if ex.article in chosen]


def carve_articles(num_articles: int, size: int, seed: int) -> list[int]:
    """The articles (0-based, sorted) of a seeded carve: the first ``size`` of ``randperm(num_articles, seed)``.

    Raises:
        DataError: ``size`` is not below the number of articles.
    """
    if size >= num_articles:
        raise DataError(f"field 'carve.size': {size} articles is not below the {num_articles} articles it carves from")
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(num_articles, generator=generator)[:size].sort().values.tolist()



def _carved_positions(n: int, size: int, seed: int, source: str, task: str) -> list[int]:
    if size >= n:
        raise DataError(f"{source}: task '{task}', field 'carve.size': {size} is not below the {n} rows it carves from")
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=generator)[:size].sort().values.tolist()


def fold_strata(task: TaskDef, examples: Sequence["Example"]) -> list[int]:
    """The stratum of each example for K-fold assignment: its class id (ranking: the correct candidate), or its
    score rounded to an integer (regression; STS-B's 0..5)."""
    return [int(round(ex.label)) if isinstance(ex.label, float) else int(ex.label) for ex in examples]  # scores: rounded


def _fold_split(task: TaskDef, split: str, data_dir: Path) -> RawSplit:
    f = task.splits[split].folds
    parent = load_split(task, f.from_split, data_dir)
    try:
        folds = fold_assignment(fold_strata(task, parent.examples), f.k, f.seed)
    except ConfigError as err:
        raise DataError(f"{parent.source}: task '{task.name}', split '{split}': {err}") from None
    keep = [i for i, fold in enumerate(folds) if (fold == f.fold - 1) == (f.keep == "in")]
    what = f"fold {f.fold} of {f.k}" if f.keep == "in" else f"all but fold {f.fold} of {f.k}"
    return RawSplit(task.name, split, f"{parent.source} ({what})", "", [parent.examples[i] for i in keep],
                    dropped=parent.dropped)


def load_split(task: TaskDef, split: str, data_dir: Path) -> RawSplit:
    """Parse and validate one split of a task.

    A ``carve`` split takes a seeded subset of another split; that split then excludes those rows.

    Raises:
        DataError: the split is not defined, its file is missing or empty, a column is missing, or a row is
            malformed (naming file, 1-based physical line, field and value) and ``on_malformed`` is ``error``.
    """
    if split not in task.splits:
        raise DataError(f"task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
    spec = task.splits[split]
    if spec.folds is not None:
        raw = _fold_split(task, split, data_dir)
    elif spec.carve is not None:
        parent = _read_source(task, spec.carve.from_split, data_dir)
        keep = _carve(parent.examples, spec.carve, parent.source, task.name)
        examples = [parent.examples[i] for i in keep]
        raw = RawSplit(task.name, split, f"{parent.source} (carved {split})", "", examples, dropped=parent.dropped)
    else:
        raw = _read_source(task, split, data_dir)
        for other, other_spec in task.splits.items():
            if other_spec.carve is not None and other_spec.carve.from_split == split:
                carved = set(_carve(raw.examples, other_spec.carve, raw.source, task.name))
                raw.examples = [ex for i, ex in enumerate(raw.examples) if i not in carved]
    raw.digest = _source_digest(task, split, data_dir) or raw.digest
    if not raw.examples:
        raise DataError(f"{raw.source}: task '{task.name}', split '{split}' has no rows")
    return raw


def article_lists(tasks: dict, data_dir) -> dict[str, dict[str, list[str]]]:
    """For every task with a split carved by article: ``{task: {split: [article titles]}}`` of its labelled
    splits (what a run writes to ``carves.json``); empty when no task carves by article."""
    lists = {}
    for name, task in tasks.items():
        if any(spec.carve is not None and spec.carve.by == "article" for spec in task.splits.values()):
            lists[name] = {split: list(dict.fromkeys(ex.title for ex in load_split(task, split, data_dir).examples))
                           for split in ("train", "dev") if split in task.splits}
    return lists
