"""Reading a task's split files: tsv/csv/jsonl tables (every field a string, each row its 1-based physical line)
and ``datasets`` hub splits, parsed into :class:`~mtdnn.tasks.rows.Example` rows with their labels checked;
the files' paths and digests (what the tokenized cache and the fingerprints are keyed by).

Files are parsed with Python's ``csv`` module rather than pandas: every field stays a string ("NA" and "n/a"
are text, not missing values), ``quoting: none`` keeps stray ``"`` characters of GLUE tsv files, CRLF line ends,
a UTF-8 BOM and trailing blank lines load correctly, and a malformed row can be named exactly.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from ..errors import DataError
from ..fileio import file_digest, quote_names, quote_prefix, undecodable_at
from .rows import LABELLED_SPLITS, Example
from .taskdef import SplitSpec, TaskDef

log = logging.getLogger("mtdnn.tasks.data")

DATA_DIR_ENV = "MTDNN_DATA_DIR"



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
    # keeps torch out of import time
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


def _source_file(task: TaskDef, split: str, data_dir: Path) -> Path | None:
    """The file a split's rows come from (a carve's or fold's source split's file); None for hub splits.

    Raises:
        DataError: the file is missing (:func:`_file_path`).
    """
    spec = task.splits[split]
    if spec.hub is not None:
        return None
    if spec.carve is not None or spec.folds is not None:
        return _source_file(task, (spec.carve or spec.folds).from_split, data_dir)
    return _file_path(task, split, data_dir)


def check_files(task: TaskDef, splits: Sequence[str], data_dir: Path) -> None:
    """Fail early if a split is undefined or its file is missing or unreadable (no parsing, no hashing: the
    files' digests are taken once, when the run records its data fingerprints).

    Raises:
        DataError: naming the task, split and expected path, or the file that cannot be read.
    """
    for split in splits:
        if split not in task.splits:
            raise DataError(f"task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
        path = _source_file(task, split, data_dir)
        if path is not None:
            try:
                with path.open("rb") as f:
                    f.read(1)
            except OSError as err:
                raise DataError(f"{path}: cannot read ({err.strerror})") from None
