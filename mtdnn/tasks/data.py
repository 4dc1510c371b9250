"""Data: read a task's split files, parse and validate every row, tokenize, and cache the result.

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

import csv
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import ConfigError, DataError, UserError
from ..fileio import file_digest, quote_names, quote_prefix, undecodable_at
from .batch import Batch
from .rows import LABELLED_SPLITS, Example
from .taskdef import SplitSpec, TaskDef

log = logging.getLogger(__name__)

DATA_DIR_ENV = "MTDNN_DATA_DIR"
CACHE_DIR_ENV = "MTDNN_CACHE_DIR"
CACHE_VERSION = 2
"""The tokenized-split cache key's version: bumped by any change to how files are parsed (2: lines end only at
``\\n``, ``\\r\\n`` or a lone ``\\r``; non-string JSON text fields refused; one number grammar for labels)."""
CACHE_RECORD = "mtdnn_cache.json"
"""The record of a tokenized-split cache entry: its key, task, split, row count, row ids' digest and the SHA-256
of each of its files, checked when the entry is read (a mismatch rebuilds it)."""


def resolve_data_dir(flag: str | None) -> Path:
    """The data root: ``--data-dir``, else ``$MTDNN_DATA_DIR``, else ``../shared/data`` when it exists.

    ``../shared/data`` is looked for beside the current directory first, then beside the source checkout.

    Raises:
        DataError: the chosen directory does not exist, or none was given and no default exists.
    """
    chosen = flag or os.environ.get(DATA_DIR_ENV)
    if chosen:
        path = Path(chosen).expanduser()
        origin = "--data-dir" if flag else f"${DATA_DIR_ENV}"
        if not path.is_dir():
            raise DataError(f"{path}: data directory ({origin}) does not exist")
        return path.resolve()
    for candidate in (Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[2] / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    raise DataError(f"no data directory: pass --data-dir or set ${DATA_DIR_ENV} (../shared/data does not exist)")


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


# ----------------------------------------------------------------------------------------------- reading files


def _file_digest(path: Path) -> str:
    return file_digest(path, DataError)


class _Typed(str):
    """A field of a JSON line (or a hub row) that is not a string, as its JSON text; ``kind`` names its type.

    Text and candidate columns refuse it (Python's ``str`` of a list or number would otherwise be trained on);
    a label or id column takes a number (its JSON text, read by the number grammar) but no other type."""

    kind: str


_JSON_KINDS = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}


def _field(value) -> str:
    """A value of a JSON line or hub row as a field: the string itself, "" for null, else a :class:`_Typed`."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        typed = _Typed(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):  # a hub type JSON has no form for
        typed = _Typed(str(value))
    typed.kind = _JSON_KINDS.get(type(value), f"a {type(value).__name__}")
    return typed


def _read_table(path: Path, spec: SplitSpec) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Rows of a tsv/csv/jsonl file as ``(physical_line, {column: value})``; also the column names.

    A row with the wrong number of fields gets ``{"__fields__": str(count)}`` so the caller can report it
    with the task's policy (error or skip).

    Raises:
        DataError: the file is not text in the split's ``encoding``, or the encoding is unknown.
    """
    try:
        return _read_table_unchecked(path, spec)
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid {spec.encoding} text at {undecodable_at(path, spec.encoding)} "
                        f"({err.reason}; set the split's 'encoding' field, e.g. encoding: latin-1)") from None
    except LookupError:
        raise DataError(f"{path}: field 'encoding': unknown encoding {spec.encoding!r}") from None
    except csv.Error as err:  # e.g. a NUL character in a file that is not text
        raise DataError(f"{path}: not a readable {spec.format} file ({err})") from None


def _read_table_unchecked(path: Path, spec: SplitSpec) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    rows: list[tuple[int, dict[str, str]]] = []
    if spec.format == "jsonl":
        columns: list[str] = []
        with path.open(encoding=spec.encoding, newline="") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    rows.append((number, {"__error__": f"not valid JSON ({err.msg})"}))
                    continue
                if not isinstance(obj, dict):
                    rows.append((number, {"__error__": "a JSON line must be an object"}))
                    continue
                rows.append((number, {str(k): _field(v) for k, v in obj.items()}))
                columns = columns or [str(k) for k in obj]
        return columns, rows

    delimiter = "\t" if spec.format == "tsv" else ","
    quoting = csv.QUOTE_NONE if spec.resolved_quoting == "none" else csv.QUOTE_MINIMAL
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding=spec.encoding, newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        columns = list(spec.columns) if spec.columns else []
        consumed = 0
        first = True
        for record in reader:
            start, consumed = consumed + 1, reader.line_num
            if not record or all(not v.strip() for v in record):
                continue  # blank line (trailing blank lines, CRLF leftovers)
            if first and spec.header:
                first = False
                if not spec.columns:
                    columns = [c.strip() for c in record]
                continue
            first = False
            if len(record) != len(columns):
                rows.append((start, {"__fields__": str(len(record))}))
                continue
            rows.append((start, dict(zip(columns, record))))
    return columns, rows


def _read_hub(spec: SplitSpec) -> tuple[list[str], list[tuple[int, dict[str, str]]], str]:
    import datasets

    hub = spec.hub
    assert hub is not None
    try:
        ds = datasets.load_dataset(hub.path, hub.name, split=hub.split)
    except Exception as err:  # network or name problems: the hub raises many types
        raise DataError(f"hub dataset {hub.path}/{hub.name or ''}[{hub.split}]: cannot load ({err})") from None
    rows = [(i + 1, {k: _field(v) for k, v in r.items()}) for i, r in enumerate(ds)]
    return list(ds.column_names), rows, f"hub:{hub.path}:{hub.name}:{hub.split}:{ds._fingerprint}"


def _build_examples(task: TaskDef, split: str, source: str, columns: list[str], rows,
                    dropped: list[int] | None = None) -> list[Example]:
    """Parse rows into examples; rows whose label is in ``task.drop_labels`` are left out (their lines are
    appended to ``dropped`` when given)."""
    kind = task.kind
    needed = list(task.text) + list(task.candidates or [])
    spec = task.splits[split]
    for col in needed + ([spec.id] if spec.id else []):
        if columns and col not in columns:
            field_name = "id" if col == spec.id else ("candidates" if col in (task.candidates or []) else "text")
            raise DataError(f"{source}: task '{task.name}', field '{field_name}': column '{col}' is not in the file "
                            f"(columns: {quote_names(columns)})")
    has_label = kind.parse_label is not None and (not columns or task.label in columns)
    if kind.parse_label is not None and not has_label and split in LABELLED_SPLITS:
        raise DataError(f"{source}: task '{task.name}', field 'label': column '{task.label}' is not in the file "
                        f"(columns: {quote_names(columns)})")

    examples: list[Example] = []
    rows_kept = 0
    for line, row in rows:
        problem = None
        if "__fields__" in row:
            problem = ("row", row["__fields__"], f"expected {len(columns)} fields ({quote_names(columns)})")
        elif "__error__" in row:
            problem = ("row", "", row["__error__"])
        else:
            missing = [c for c in needed + ([task.label] if has_label else []) if c not in row]
            if missing:
                problem = (missing[0], "", "field is missing")
            else:
                labels = ([task.label] if has_label else []) + ([spec.id] if spec.id else [])
                problem = _typed_problem(row, needed, labels)
        label = None
        if problem is None and has_label and task.drop_labels and row[task.label].strip() in task.drop_labels:
            if dropped is not None:
                dropped.append(line)
            continue
        if problem is None and has_label:
            try:
                label = kind.parse_label(task, row[task.label])
            except ValueError as err:
                problem = (task.label, row[task.label], str(err))
        if problem is not None:
            col, value, reason = problem
            shown = quote_prefix(value, quoted=not isinstance(value, _Typed))  # a JSON value as its JSON text
            message = (f"{source}: line {line}: task '{task.name}', field '{col}': {reason}"
                       + (f" (value: {shown})" if col != "row" else f" (found {value} fields)" if value else ""))
            if task.on_malformed == "skip":
                log.warning("skipping malformed row: %s", message)
                continue
            raise DataError(message + " [set on_malformed: skip in the task definition to skip such rows]")
        made = kind.make_examples(task, row, line)
        row_id = row[spec.id] if spec.id else str(rows_kept)
        rows_kept += 1
        for k, ex in enumerate(made):
            ex.id = row_id if len(made) == 1 else f"{row_id}.{k}"
            ex.label = label
            examples.append(ex)
    return examples


def _typed_problem(row: dict, texts: list[str], numbers: list[str]):
    """``(column, value, reason)`` of the first text column holding a JSON value that is not a string, or label
    or id column holding one that is neither a string nor a number; None when there is none."""
    for col in texts:
        if isinstance(row[col], _Typed):
            return col, row[col], f"expected a string (or null), found {row[col].kind}"
    for col in numbers:
        if isinstance(row.get(col), _Typed) and row[col].kind != "a number":
            return col, row[col], f"expected a string or a number, found {row[col].kind}"
    return None


def _file_path(task: TaskDef, split: str, data_dir: Path) -> Path:
    spec = task.splits[split]
    assert spec.path is not None
    path = data_dir / spec.path
    if not path.is_file():
        raise DataError(f"{path}: task '{task.name}', split '{split}': file not found "
                        f"(data root {data_dir}; set --data-dir or ${DATA_DIR_ENV})")
    return path


def _source_digest(task: TaskDef, split: str, data_dir: Path) -> str | None:
    """A digest of everything a split's rows depend on (file bytes, carving); None for hub splits."""
    spec = task.splits[split]
    if spec.hub is not None:
        return None
    if spec.carve is not None:
        parent = _source_digest(task, spec.carve.from_split, data_dir)
        return parent and f"{parent}:carve:{spec.carve.size}:{spec.carve.seed}" + _by(spec.carve)
    if spec.folds is not None:
        parent = _source_digest(task, spec.folds.from_split, data_dir)
        f = spec.folds
        return parent and f"{parent}:folds:{f.k}:{f.fold}:{f.keep}:{f.seed}"
    digest = _file_digest(_file_path(task, split, data_dir))
    for other, other_spec in task.splits.items():
        if other_spec.carve is not None and other_spec.carve.from_split == split:
            digest += f":minus:{other}:{other_spec.carve.size}:{other_spec.carve.seed}" + _by(other_spec.carve)
    return digest


def _by(carve) -> str:
    """The carve unit in a digest, only when not rows (so that row carves keep their cache keys)."""
    return "" if carve.by == "row" else f":by:{carve.by}"


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
    from .subsets import fold_assignment

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


def check_files(task: TaskDef, splits: Sequence[str], data_dir: Path) -> None:
    """Fail early if a split is undefined or its file is missing (no parsing).

    Raises:
        DataError: naming the task, split and expected path.
    """
    for split in splits:
        if split not in task.splits:
            raise DataError(f"task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
        _source_digest(task, split, data_dir)


# ----------------------------------------------------------------------------------------------- tokenization


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
    from ..errors import ConfigError

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
    from ..fileio import default_mode, file_digests, make_dir, write_json_atomic

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
    import datasets

    from ..fileio import file_digests, read_json

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
    import datasets

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


# ----------------------------------------------------------------------------------------------- batching


def collate(features: list[dict[str, Any]], task: TaskDef, pad_token_id: int, pad_to_multiple_of: int = 1,
            tokenizer=None, padding_side: str = "right") -> Batch:
    """Pad a list of items from :class:`TokenizedSplit` into a batch for ``task`` (dynamic padding), with the
    type's collation (:meth:`mtdnn.tasks.types.TaskKind.collate`). ``padding_side``: the tokenizer's; ``left``
    moves every row's padding before its tokens (:func:`pad_left`; XLNet, whose summary token <cls> then sits in
    the last position of every row).

    Returns the type's :class:`~mtdnn.tasks.batch.Batch`: ``task`` (name), ``input_ids``, ``attention_mask`` and, if
    present, ``token_type_ids``, each ``(batch * num_candidates, seq_len)`` int64 with ``seq_len`` the longest
    sequence rounded up to ``pad_to_multiple_of``; ``idx`` ``(batch,)`` row positions; ``weight`` ``(batch,)``
    float32 (0 masks an example out of loss and metrics: used for DDP padding); ``labels`` (the type's shape:
    ``(batch,)`` int64 class or candidate index, or float32 score, for the sentence-level types) when the split is
    labelled; ``head_inputs``, a dict of tensors the head needs beyond the encoder's output (e.g. SAN's
    ``sequence_ids``), when the type has any. ``tokenizer``: needed by
    types that change tokens when collating (``mlm`` masks them; :mod:`mtdnn.tasktypes.mlm` gives its batch).
    """
    batch = task.kind.collate(features, task, pad_token_id, pad_to_multiple_of, tokenizer)
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be right or left (got {padding_side!r})")
    return pad_left(batch) if padding_side == "left" else batch


def pad_left(batch: Batch) -> Batch:
    """A right-padded batch padded on the left instead: each row of every token-aligned tensor
    ``(rows, seq_len, ...)`` (``input_ids``, ``attention_mask``, ``token_type_ids``, token-aligned ``head_inputs``
    and labels) is rolled right by its padding, ``seq_len - attention_mask[row].sum()``."""
    mask = batch.attention_mask
    rows, seq_len = mask.shape
    shift = seq_len - mask.sum(1)
    index = (torch.arange(seq_len).unsqueeze(0) - shift.unsqueeze(1)) % seq_len  # (rows, seq_len): source column

    def roll(value):
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (rows, seq_len):
            gather = index.view(rows, seq_len, *([1] * (value.dim() - 2))).expand_as(value)
            return value.gather(1, gather)
        if isinstance(value, dict):
            return {k: roll(v) for k, v in value.items()}
        return value

    return dataclasses.replace(batch, **{f.name: roll(getattr(batch, f.name)) for f in dataclasses.fields(batch)})
