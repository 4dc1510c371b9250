"""HANS (McCoy et al. 2019, "Right for the Wrong Reasons", arXiv 1902.01007): does an NLI model lean on the
lexical-overlap, subsequence and constituent heuristics?

    HANS file --open_hans--> HansFile (layout checked; rows streamed) --score_hans(predict, batch_size)-->
    counts per (heuristic, subcase, gold label) --summarise--> accuracy per heuristic x gold label, per
    subcase, overall --write_hans_outputs--> diagnose-hans.json + hans.png (grouped bars)

Two layouts are read:

- **released** (the HANS repository's ``heuristics_evaluation_set.txt``): one tab-separated file whose header
  names ``gold_label``, ``sentence1``, ``sentence2``, ``heuristic``, ``subcase`` (other columns are ignored); read
  by column name. A ``gold_label`` other than ``entailment`` / ``non-entailment`` is refused with its line.
- **sample** (``hans/sample/hans_sample600.txt`` in the shared data): no header, ``sentence1, sentence2, label``
  with 0 = entailment and 1 = non-entailment, and beside it ``<name>_index.tsv`` (header ``row, pairID, block,
  heuristic_inferred, subcase_inferred, label``), one line per pair in the same order. Its heuristic and subcase
  were inferred from the order of the 30 blocks of 1,000 rows; the JSON says so (``heuristic_source``).

Predictions of a 3-class head count neutral and contradiction as non-entailment, as in the paper (section 4);
the mapping of a task's labels comes from their names or from ``--label-map``. Rows are read, tokenized and
scored one batch at a time, so the 30,000-row HANS set takes the memory of one batch.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ...errors import ConfigError, DataError
from ...fileio import write_json_atomic
from ...tasks.taskdef import TaskDef

HEURISTICS = ("lexical_overlap", "subsequence", "constituent")
ENTAILMENT, NON_ENTAILMENT = "entailment", "non-entailment"
GOLD_LABELS = (ENTAILMENT, NON_ENTAILMENT)
DEFAULT_HANS = "hans/sample/hans_sample600.txt"
RELEASED_COLUMNS = ("gold_label", "sentence1", "sentence2", "heuristic", "subcase")
INDEX_COLUMNS = ("row", "pairID", "block", "heuristic_inferred", "subcase_inferred", "label")
SAMPLE_LABELS = {"0": ENTAILMENT, "1": NON_ENTAILMENT}
# Label names whose meaning is plain (lower-cased); anything else needs --label-map.
KNOWN_LABELS = {"entailment": ENTAILMENT, "entails": ENTAILMENT, "entailed": ENTAILMENT,
                "non-entailment": NON_ENTAILMENT, "non_entailment": NON_ENTAILMENT,
                "not_entailment": NON_ENTAILMENT, "not-entailment": NON_ENTAILMENT,
                "neutral": NON_ENTAILMENT, "contradiction": NON_ENTAILMENT}


@dataclass(frozen=True)
class HansExample:
    """One HANS pair: premise, hypothesis, gold label (entailment or non-entailment), heuristic, subcase and
    the 1-based line of the data file it came from."""

    premise: str
    hypothesis: str
    gold: str
    heuristic: str
    subcase: str
    line: int


Predictor = Callable[[Sequence[HansExample]], list[str]]
"""Maps a batch of examples to one prediction each, ``entailment`` or ``non-entailment``."""


# ------------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class HansFile:
    """A checked HANS file; iterating it streams :class:`HansExample` rows (the file is never read whole).

    ``layout``: ``released`` or ``sample``; ``index``: the sample's index file; ``heuristic_source``: where the
    heuristic and subcase of each row come from, in words.
    """

    path: Path
    layout: str
    index: Path | None = None

    @property
    def heuristic_source(self) -> str:
        if self.layout == "released":
            return "the file's heuristic and subcase columns"
        return (f"inferred from block order: columns heuristic_inferred and subcase_inferred of {self.index} "
                "(each block of 1,000 rows of the full set is one subcase)")

    def __iter__(self) -> Iterator[HansExample]:
        return self._released() if self.layout == "released" else self._sample()

    def _released(self) -> Iterator[HansExample]:
        with self.path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            columns = [c.strip() for c in next(reader)]
            where = {name: columns.index(name) for name in RELEASED_COLUMNS}
            for record in reader:
                line = reader.line_num
                if not record or all(not v.strip() for v in record):
                    continue
                if len(record) != len(columns):
                    raise DataError(f"{self.path}: line {line}: expected {len(columns)} tab-separated fields "
                                    f"(found {len(record)})")
                gold = record[where["gold_label"]].strip()
                if gold not in GOLD_LABELS:
                    raise DataError(f"{self.path}: line {line}: field 'gold_label': {gold!r} is not "
                                    f"{ENTAILMENT} or {NON_ENTAILMENT}")
                yield HansExample(record[where["sentence1"]], record[where["sentence2"]], gold,
                                  record[where["heuristic"]].strip(), record[where["subcase"]].strip(), line)

    def _sample(self) -> Iterator[HansExample]:
        assert self.index is not None
        with self.path.open(encoding="utf-8-sig", newline="") as data, \
                self.index.open(encoding="utf-8-sig", newline="") as index:
            rows = csv.reader(data, delimiter="\t", quoting=csv.QUOTE_NONE)
            entries = csv.DictReader(index, delimiter="\t", quoting=csv.QUOTE_NONE)
            for record in rows:
                line = rows.line_num
                if not record or all(not v.strip() for v in record):
                    continue
                if len(record) != 3:
                    raise DataError(f"{self.path}: line {line}: expected 3 tab-separated fields (sentence1, "
                                    f"sentence2, label) (found {len(record)})")
                label = record[2].strip()
                if label not in SAMPLE_LABELS:
                    raise DataError(f"{self.path}: line {line}: field 'label': {label!r} is not 0 (entailment) "
                                    "or 1 (non-entailment)")
                entry = next(entries, None)
                if entry is None:
                    raise DataError(f"{self.index}: has fewer rows than {self.path} (none for its line {line})")
                if entry["label"].strip() != SAMPLE_LABELS[label]:
                    raise DataError(f"{self.index}: line {entries.line_num}: field 'label': {entry['label']!r} does "
                                    f"not match {self.path} line {line} (label {label} = {SAMPLE_LABELS[label]})")
                yield HansExample(record[0], record[1], SAMPLE_LABELS[label], entry["heuristic_inferred"].strip(),
                                  entry["subcase_inferred"].strip(), line)
            if next(entries, None) is not None:
                raise DataError(f"{self.index}: has more rows than {self.path}")


def _first_record(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            for record in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if record and any(v.strip() for v in record):
                    return [v.strip() for v in record]
    except OSError as err:
        raise DataError(f"{path}: cannot read the HANS file ({err.strerror})") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    raise DataError(f"{path}: the HANS file is empty")


def open_hans(path: str | Path, index: str | Path | None = None) -> HansFile:
    """Check a HANS file's layout (see the module docstring) from its first line, without reading it all.

    Args:
        path: a released HANS file (with a header) or a headerless sample file.
        index: the sample's index file; by default ``<stem>_index.tsv`` beside ``path``.

    Raises:
        DataError: the file is missing or empty, a released file lacks one of ``gold_label``, ``sentence1``,
            ``sentence2``, ``heuristic``, ``subcase``, the first line is neither a header nor a sample row, or a
            sample file has no index (or the index lacks a column).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: HANS file not found (--hans)")
    first = _first_record(path)
    if "gold_label" in first or "sentence1" in first:
        missing = [c for c in RELEASED_COLUMNS if c not in first]
        if missing:
            raise DataError(f"{path}: column {', '.join(repr(c) for c in missing)} is not in the header (columns: "
                            f"{', '.join(first)}); a released HANS file names {', '.join(RELEASED_COLUMNS)}")
        return HansFile(path, "released")
    if len(first) == 3 and first[2] in SAMPLE_LABELS:
        index = Path(index) if index else path.with_name(f"{path.stem}_index.tsv")
        if not index.is_file():
            raise DataError(f"{path}: a headerless HANS file (sentence1, sentence2, label) needs its index {index} "
                            "for each row's heuristic and subcase (give --hans-index), or use a released HANS file "
                            "with heuristic and subcase columns")
        header = _first_record(index)
        missing = [c for c in INDEX_COLUMNS if c not in header]
        if missing:
            raise DataError(f"{index}: column {', '.join(repr(c) for c in missing)} is not in the header (columns: "
                            f"{', '.join(header)}; expected {', '.join(INDEX_COLUMNS)})")
        return HansFile(path, "sample", index)
    raise DataError(f"{path}: line 1 is neither a released HANS header (naming {', '.join(RELEASED_COLUMNS)}) nor "
                    f"a sample row (sentence1, sentence2, 0 or 1); found {len(first)} fields: {first[:4]}")


# ------------------------------------------------------------------------------------------------ label mapping


def parse_label_map(text: str | None) -> dict[str, str]:
    """``--label-map`` ``"LABEL=entailment,LABEL=non-entailment,..."`` as a dict.

    Raises:
        ConfigError: an item without ``=``, or a value other than entailment / non-entailment.
    """
    if not text:
        return {}
    mapping = {}
    for item in text.split(","):
        label, sep, value = item.partition("=")
        if not sep or not label.strip():
            raise ConfigError(f"--label-map {text!r}: {item!r} is not LABEL=entailment or LABEL=non-entailment")
        if value.strip() not in GOLD_LABELS:
            raise ConfigError(f"--label-map {text!r}: {value.strip()!r} (for label {label.strip()!r}) is not "
                              f"{ENTAILMENT} or {NON_ENTAILMENT}")
        mapping[label.strip()] = value.strip()
    return mapping


def entailment_label_map(task: TaskDef, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Which of ``task``'s labels mean entailment and which non-entailment.

    A label named entailment (entails, entailed) means entailment; non-entailment, not_entailment, neutral and
    contradiction mean non-entailment (McCoy et al. 2019, section 4: neutral and contradiction predictions
    count as non-entailment). ``overrides`` (``--label-map``) decide for the labels they name.

    Returns:
        ``{task label: "entailment" | "non-entailment"}`` for every label of the task.

    Raises:
        ConfigError: the task is not a two-text classification task; an override names a label the task does
            not have; a label's meaning is unknown (the message names it and shows ``--label-map``); or no label
            means entailment (or none non-entailment).
    """
    overrides = overrides or {}
    if task.type != "classification" or len(task.text) != 2:
        raise ConfigError(f"task '{task.name}': HANS needs a classification task over premise and hypothesis "
                          f"(it is {task.type} with text columns {task.text})")
    labels = list(task.labels or [])
    unknown = [label for label in overrides if label not in labels]
    if unknown:
        raise ConfigError(f"--label-map: task '{task.name}' has no label {', '.join(map(repr, unknown))} "
                          f"(labels: {', '.join(labels)})")
    mapping, unclear = {}, []
    for label in labels:
        meaning = overrides.get(label) or KNOWN_LABELS.get(label.strip().lower())
        if meaning is None:
            unclear.append(label)
        mapping[label] = meaning
    if unclear:
        example = ",".join(f"{label}=non-entailment" for label in unclear)
        raise ConfigError(f"task '{task.name}': the label name(s) {', '.join(map(repr, unclear))} do not say whether "
                          f"they mean {ENTAILMENT} or {NON_ENTAILMENT} (labels: {', '.join(labels)}); give "
                          f"--label-map, e.g. --label-map {example}")
    for needed in GOLD_LABELS:
        if needed not in mapping.values():
            raise ConfigError(f"task '{task.name}' has no {needed} label (labels: {', '.join(labels)} -> "
                              f"{', '.join(f'{k}={v}' for k, v in mapping.items())}); HANS scores entailment "
                              f"against non-entailment (fix with --label-map)")
    return mapping


# ------------------------------------------------------------------------------------------------ predictors


_WORD = re.compile(r"[^\W_]+")


def word_overlap_rule(batch: Sequence[HansExample]) -> list[str]:
    """The lexical-overlap heuristic as a model: entailment if and only if every hypothesis word (lower-cased)
    is a word of the premise (McCoy et al. 2019, section 2)."""
    out = []
    for ex in batch:
        premise = set(_WORD.findall(ex.premise.lower()))
        hypothesis = set(_WORD.findall(ex.hypothesis.lower()))
        out.append(ENTAILMENT if hypothesis <= premise else NON_ENTAILMENT)
    return out


RULES: dict[str, Predictor] = {"word-overlap": word_overlap_rule}


def model_predictor(loaded, task: TaskDef, mapping: dict[str, str], device: str = "cpu") -> Predictor:
    """A :data:`Predictor` from a loaded run or export (:class:`mtdnn.training.inference.LoadedModel`).

    Each call tokenizes only its batch (as ``mtdnn.predict`` tokenizes raw input: premise, hypothesis, the run's
    max length), scores it with the task's head and maps the arg-max label through ``mapping``.
    """
    from ...tasks.data import Example, tokenize_examples
    from ...training.inference import predict_outputs

    labels = list(task.labels or [])
    pad_id = loaded.tokenizer.pad_token_id or 0
    model = loaded.model.to(device)

    def predict(batch: Sequence[HansExample]) -> list[str]:
        examples = [Example(id=str(i), line=ex.line, text_a=ex.premise, text_b=ex.hypothesis)
                    for i, ex in enumerate(batch)]
        split = tokenize_examples(examples, task, loaded.tokenizer, loaded.max_length, split="hans")
        logits = predict_outputs(model, task, split, pad_id, max(len(batch), 1), loaded.pad_to_multiple_of,
                                 device=device)  # (batch, num_labels)
        return [mapping[labels[i]] for i in logits.argmax(-1).tolist()]

    return predict


# ------------------------------------------------------------------------------------------------ scoring


def score_hans(examples: Iterable[HansExample], predict: Predictor, batch_size: int = 64) -> Counter:
    """Stream ``examples`` through ``predict`` in batches of ``batch_size``; keep only counts.

    Returns:
        ``Counter`` keyed by ``(heuristic, subcase, gold, correct)`` with ``correct`` a bool.

    Raises:
        ConfigError: the predictor returns a wrong number of predictions or a value that is not a HANS label.
    """
    counts: Counter = Counter()

    def flush(batch: list[HansExample]) -> None:
        predictions = predict(batch)
        if len(predictions) != len(batch):
            raise ConfigError(f"HANS predictor returned {len(predictions)} predictions for {len(batch)} examples")
        for ex, predicted in zip(batch, predictions):
            if predicted not in GOLD_LABELS:
                raise ConfigError(f"HANS predictor returned {predicted!r} (expected {ENTAILMENT} or {NON_ENTAILMENT})")
            counts[(ex.heuristic, ex.subcase, ex.gold, predicted == ex.gold)] += 1

    batch: list[HansExample] = []
    for ex in examples:
        batch.append(ex)
        if len(batch) == batch_size:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    return counts


def _cell(correct: int, total: int) -> dict:
    return {"accuracy": correct / total if total else None, "correct": correct, "n": total}


def summarise(counts: Counter) -> dict:
    """Accuracy overall, per heuristic x gold label and per subcase from :func:`score_hans` counts.

    Returns:
        ``{"overall": cell, "by_heuristic": {heuristic: {gold: cell, "all": cell}}, "by_subcase": {subcase:
        {"heuristic", "gold", **cell}}}`` with cell = ``{"accuracy", "correct", "n"}`` (accuracy None when n = 0).
    """
    heuristics = [h for h in HEURISTICS if any(k[0] == h for k in counts)]
    heuristics += sorted({k[0] for k in counts} - set(heuristics))
    total = sum(counts.values())
    right = sum(v for k, v in counts.items() if k[3])
    by_heuristic = {}
    for h in heuristics:
        cells = {}
        for gold in GOLD_LABELS:
            n = sum(v for k, v in counts.items() if k[0] == h and k[2] == gold)
            cells[gold] = _cell(sum(v for k, v in counts.items() if k[0] == h and k[2] == gold and k[3]), n)
        n = sum(v for k, v in counts.items() if k[0] == h)
        cells["all"] = _cell(sum(v for k, v in counts.items() if k[0] == h and k[3]), n)
        by_heuristic[h] = cells
    by_subcase = {}
    for h, subcase, gold in sorted({k[:3] for k in counts}, key=lambda k: (heuristics.index(k[0]), k[2], k[1])):
        n = sum(v for k, v in counts.items() if k[:3] == (h, subcase, gold))
        right_here = counts[(h, subcase, gold, True)]
        by_subcase[subcase] = {"heuristic": h, "gold": gold, **_cell(right_here, n)}
    return {"overall": _cell(right, total), "by_heuristic": by_heuristic, "by_subcase": by_subcase}


def format_hans_table(summary: dict) -> str:
    """Markdown: accuracy per heuristic (rows) x gold label (columns), then per subcase."""
    lines = ["| heuristic | entailment | non-entailment | all |", "|---|---:|---:|---:|"]
    fmt = lambda c: "-" if c["accuracy"] is None else f"{c['accuracy']:.3f} ({c['n']})"  # noqa: E731
    for h, cells in summary["by_heuristic"].items():
        lines.append(f"| {h} | {fmt(cells[ENTAILMENT])} | {fmt(cells[NON_ENTAILMENT])} | {fmt(cells['all'])} |")
    lines.append(f"| **overall** | | | {fmt(summary['overall'])} |")
    lines += ["", "| subcase | heuristic | gold | accuracy (n) |", "|---|---|---|---:|"]
    for subcase, cell in summary["by_subcase"].items():
        lines.append(f"| {subcase} | {cell['heuristic']} | {cell['gold']} | {fmt(cell)} |")
    return "\n".join(lines) + "\n"


def write_hans_outputs(result: dict, output_dir: str | Path, stem: str = "diagnose-hans") -> dict[str, Path]:
    """Write ``<stem>.json`` (``result``) and ``<stem>.png`` (grouped bars: heuristic x gold label) atomically."""
    from .outputs import claim_diagnose_dir

    output_dir = claim_diagnose_dir(output_dir)
    from .plots import grouped_bars

    output_dir = Path(output_dir)
    by_heuristic = result["summary"]["by_heuristic"]
    groups = list(by_heuristic)
    series = {gold: [by_heuristic[h][gold]["accuracy"] for h in groups] for gold in GOLD_LABELS}
    png = grouped_bars(output_dir / f"{stem}.png", groups, series,
                       f"HANS: {result['model']} ({result['examples']} examples)")
    path = output_dir / f"{stem}.json"
    write_json_atomic(path, {**result, "plot": png.name})
    return {"json": path, "png": png}


def hans_diagnosis(hans: HansFile, predict: Predictor, model: str, batch_size: int = 64,
                   task: str | None = None, label_map: dict[str, str] | None = None) -> dict:
    """Score ``hans`` with ``predict`` and return the JSON-ready result (file, layout, where the heuristic
    and subcase come from, the label mapping, counts and :func:`summarise`)."""
    counts = score_hans(hans, predict, batch_size)
    summary = summarise(counts)
    print(f"HANS: {summary['overall']['n']} examples scored", file=sys.stderr)
    return {"model": model, "task": task, "hans_file": str(hans.path), "layout": hans.layout,
            "index_file": str(hans.index) if hans.index else None, "heuristic_source": hans.heuristic_source,
            "label_map": label_map, "examples": summary["overall"]["n"], "batch_size": batch_size,
            "summary": summary}
