"""``python -m mtdnn.predict MODEL --task T``: predictions on a split, on raw text, or on a file or stdin.

Examples::

    python -m mtdnn.predict runs/<run> --task rte --split test --output preds/      # GLUE submission preds/RTE.tsv
    python -m mtdnn.predict runs/<run> --task mrpc --text "The cat sat." "A cat was sitting."
    echo -e "premise\\thypothesis" | python -m mtdnn.predict runs/<run> --task rte --input -
    python -m mtdnn.predict runs/<run>/export --task rte --input pairs.jsonl --format jsonl --output rte.jsonl

``MODEL`` is a complete run directory (its best checkpoint, or ``--checkpoint``) or an export directory.
Raw input (``--input FILE`` or ``-`` for stdin) holds one example per line, without a header: tab-separated
fields in the order of the task's ``text`` columns (then its ``candidates`` columns for ranking tasks), or
JSON objects keyed by those column names (string values, or null for an empty text). Blank lines are skipped.
A line ends at ``\n``, ``\r\n`` or a lone ``\r``, as in training files (:func:`mtdnn.fileio.split_lines`); any other
character (U+2028, U+0085, a form feed) is text of its field.

Output (``--format``): ``tsv`` (``id``, ``prediction``: the label name, the score for regression or the
candidate index for ranking, ``probability`` of the prediction and ``prob_<label>`` columns), ``jsonl`` (the
same fields, ``probabilities`` as an object), or ``glue``: the GLUE leaderboard's submission file
(``index``, ``prediction``; named after the task's ``glue_name``, e.g. ``RTE.tsv``, ``STS-B.tsv``), the default
for the ``test`` split of a GLUE task. A tsv field holding a tab, a line break or a double quote is quoted as
the csv module's ``excel-tab`` dialect quotes it (``"a<TAB>b"``, quotes doubled). ``--output`` is a file, or a
directory (ending in ``/`` or existing) that receives ``<glue_name>.tsv`` or ``<task>-<split>.<format>``; by
default predictions go to stdout. Files are written atomically once every prediction is made, so a failure never
leaves a partial file.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import sys
from pathlib import Path

from ..errors import DataError
from ..fileio import check_name_lengths, quote_prefix, split_lines
from ..tasks.rows import Example
from ..tasks.taskdef import TaskDef

log = logging.getLogger("mtdnn.predict")


# ------------------------------------------------------------------------------------------------------ input


def input_columns(task: TaskDef) -> list[str]:
    """The fields of one raw example, in order: the ``text`` columns, then ``candidates`` (ranking)."""
    return list(task.text) + list(task.candidates or [])


def make_example(task: TaskDef, fields: list[str], example_id: str, line: int) -> Example:
    """An unlabelled :class:`~mtdnn.tasks.data.Example` from fields in :func:`input_columns` order (the type's
    ``make_examples``)."""
    [example] = task.kind.make_examples(task, dict(zip(input_columns(task), fields)), line)
    example.id = example_id
    return example


def raw_rows(lines: list[str], source: str, task: TaskDef, columns: list[str], fmt: str):
    """Yield ``(line number, where, id, fields)`` for each non-blank ``tsv`` or ``jsonl`` line: ``fields`` in
    ``columns`` order (a JSON null as ""), ``id`` the 0-based row number or a JSON ``id``, ``where`` the line's
    name for error messages.

    Raises:
        DataError: naming ``source`` and the 1-based line: a wrong number of fields, invalid JSON, a missing
            column, a column that is not a JSON string (or null), or no row at all.
    """
    rows = 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        where = f"{source}: line {number}: task '{task.name}'"
        if fmt == "tsv":
            fields = line.split("\t")
            if len(fields) != len(columns):
                raise DataError(f"{where}: expected {len(columns)} tab-separated field(s) ({', '.join(columns)}), "
                                f"found {len(fields)}")
            row_id = str(rows)
        else:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not valid JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{where}: expected a JSON object with keys {', '.join(columns)}")
            missing = [c for c in columns if c not in obj]
            if missing:
                raise DataError(f"{where}: field '{missing[0]}' is missing (expected keys: {', '.join(columns)})")
            fields = [json_text(obj[c], f"{where}, field '{c}'") for c in columns]
            row_id = str(obj["id"]) if "id" in obj else str(rows)
        rows += 1
        yield number, where, row_id, fields
    if not rows:
        raise DataError(f"{source}: no examples (the input is empty); expected one per line: {', '.join(columns)}")


JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}


def json_text(value, where: str) -> str:
    """A text field of a JSON input line: the string itself, "" for null.

    Raises:
        DataError: naming ``where`` (the input, line, task and field): any other JSON value (a number, a
            boolean, an array, an object), which would otherwise be predicted as its Python ``str``.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string, found {JSON_TYPES[type(value)]} (value: "
                        f"{quote_prefix(json.dumps(value, ensure_ascii=False), 200, quoted=False)})")
    return value


def parse_lines(lines: list[str], source: str, task: TaskDef, fmt: str) -> list[Example]:
    """Examples from raw ``tsv`` or ``jsonl`` lines; ids are 0-based row numbers (or a JSON ``id``).

    Raises:
        DataError: see :func:`raw_rows`.
    """
    return [make_example(task, fields, row_id, number)
            for number, _, row_id, fields in raw_rows(lines, source, task, input_columns(task), fmt)]


def read_lines(name: str, fmt: str) -> tuple[list[str], str, str]:
    """The lines of a file, or of stdin when ``name`` is ``-``, with the source's name and the format (``auto``:
    jsonl for ``*.jsonl`` files or a first line starting with ``{``, else tsv).

    Raises:
        DataError: the file cannot be read or is not UTF-8.
    """
    source = "<stdin>" if name == "-" else name
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8-sig")
    except OSError as err:
        raise DataError(f"{source}: cannot read the input ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = split_lines(text)  # not str.splitlines, which also ends lines at U+2028, U+0085, \f, ...
    if fmt == "auto":
        first = next((ln.lstrip() for ln in lines if ln.strip()), "")
        fmt = "jsonl" if name.endswith(".jsonl") or first.startswith("{") else "tsv"
    return lines, source, fmt


def read_input(name: str, fmt: str, task: TaskDef) -> list[Example]:
    """Examples from a file, or from stdin when ``name`` is ``-`` (see :func:`read_lines`, :func:`parse_lines`).

    Raises:
        DataError: see :func:`read_lines` and :func:`raw_rows`.
    """
    lines, source, fmt = read_lines(name, fmt)
    return parse_lines(lines, source, task, fmt)


def text_example(texts: list[str], task: TaskDef) -> list[Example]:
    """The single example given with ``--text``.

    Raises:
        DataError: the number of texts does not match the task's input columns.
    """
    columns = input_columns(task)
    if len(texts) != len(columns):
        raise DataError(f"--text: task '{task.name}' takes {len(columns)} text(s) ({', '.join(columns)}), "
                        f"got {len(texts)}")
    return [make_example(task, list(texts), "0", 1)]


# ------------------------------------------------------------------------------------------------------ output


GLUE_SCORE_RANGE = (0.0, 5.0)


def tsv_line(fields: list) -> str:
    r"""One line of a tsv output, ending in ``\n``: the fields (``str`` of each) separated by tabs, quoted as the
    csv module's ``excel-tab`` dialect quotes them, so that no field holds a raw tab or line break: a field
    holding a tab, a ``\n``, a ``\r`` or a double quote is written between double quotes, its quotes doubled
    (``csv.reader(f, dialect="excel-tab")`` and ``pandas.read_csv(f, sep="\t")`` read it back); any other field
    is written as it is.
    """
    out = io.StringIO()
    csv.writer(out, dialect="excel-tab").writerow(fields)  # the dialect's \r\n row end makes it quote \r and \n
    return out.getvalue().removesuffix("\r\n") + "\n"


def format_predictions(task: TaskDef, ids: list[str], predictions: list[dict], fmt: str) -> str:
    """The output file's text: ``tsv``, ``jsonl`` or ``glue`` (see the module docstring).

    In a GLUE submission file, regression predictions are clipped to [0, 5], the score range of STS-B (GLUE's one
    regression task; Wang et al. 2019, arXiv 1804.07461): the benchmark expects scores in that range.
    """
    if fmt == "glue":
        lo, hi = GLUE_SCORE_RANGE
        shown = [f"{min(max(p['prediction'], lo), hi):.3f}" if task.kind.predicts_scores
                 else f"{p['prediction']:.3f}" if isinstance(p["prediction"], float) else str(p["prediction"])
                 for p in predictions]
        return tsv_line(["index", "prediction"]) + "".join(tsv_line([i, s]) for i, s in zip(ids, shown))
    rows = []
    for i, p in zip(ids, predictions):
        row = {"id": i, "prediction": round(p["prediction"], 6) if isinstance(p["prediction"], float) else p["prediction"]}
        if "probabilities" in p:
            row["probability"] = round(p["probability"], 6)
            row["probabilities"] = {k: round(v, 6) for k, v in p["probabilities"].items()}
        rows.append(row)
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    names = list(rows[0].get("probabilities", {}))
    header = ["id", "prediction"] + (["probability"] + [f"prob_{n}" for n in names] if names else [])
    lines = [tsv_line(header)]
    for r in rows:
        values = [r["id"], r["prediction"]] + ([r["probability"]] + list(r["probabilities"].values()) if names else [])
        lines.append(tsv_line(values))
    return "".join(lines)


def output_path(output: str | None, task: TaskDef, split: str, fmt: str) -> Path | None:
    """The file to write: ``output`` itself, or a file named for the task inside a directory; None: stdout."""
    if output is None:
        return None

    path = check_name_lengths(output, "--output")  # before any stat: a name over 255 bytes is an OSError there
    if not (output.endswith(("/", "\\")) or path.is_dir()):
        return path
    if fmt == "glue":
        return path / f"{task.glue_name}.tsv"
    return path / f"{task.name}-{split}.{fmt}"


# ------------------------------------------------------------------------------------------------------ predict


def predict_examples(loaded, task: TaskDef, split, batch_size: int | None = None, device: str = "auto",
                     progress: str | None = None) -> list[dict]:
    """Predictions of a loaded model (:func:`mtdnn.training.inference.load_model`) for every row of a tokenized
    ``split`` of ``task``, in its order (see :func:`mtdnn.training.inference.decode` for the fields).

    ``progress``: a label for the progress line on stderr (None: silent)."""

    # keeps torch out of import time (predict --help and the input checks need none)
    from ..training.inference import decode, predict_outputs, resolve_device

    device = resolve_device(device)
    outputs = predict_outputs(loaded.model.to(device), task, split, loaded.tokenizer.pad_token_id or 0,
                              batch_size or loaded.eval_batch_size, loaded.pad_to_multiple_of, device=device,
                              progress=progress)
    return decode(task, outputs)
