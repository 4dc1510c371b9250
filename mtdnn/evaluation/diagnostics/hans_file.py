"""Reading HANS files (McCoy et al. 2019, arXiv 1902.01007): the two layouts, checked from the first line, then
streamed row by row (the file is never read whole); scoring and the report are :mod:`.hans`.

Two layouts are read:

- **released** (the HANS repository's ``heuristics_evaluation_set.txt``): one tab-separated file whose header
  names ``gold_label``, ``sentence1``, ``sentence2``, ``heuristic``, ``subcase`` (other columns are ignored); read
  by column name. A ``gold_label`` other than ``entailment`` / ``non-entailment`` is refused with its line.
- **sample** (``hans/sample/hans_sample600.txt`` in the shared data): no header, ``sentence1, sentence2, label``
  with 0 = entailment and 1 = non-entailment, and beside it ``<name>_index.tsv`` (header ``row, pairID, block,
  heuristic_inferred, subcase_inferred, label``), one line per pair in the same order. Its heuristic and subcase
  were inferred from the order of the 30 blocks of 1,000 rows; the JSON says so (``heuristic_source``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ...errors import DataError

HEURISTICS = ("lexical_overlap", "subsequence", "constituent")
ENTAILMENT, NON_ENTAILMENT = "entailment", "non-entailment"
GOLD_LABELS = (ENTAILMENT, NON_ENTAILMENT)
DEFAULT_HANS = "hans/sample/hans_sample600.txt"
RELEASED_COLUMNS = ("gold_label", "sentence1", "sentence2", "heuristic", "subcase")
INDEX_COLUMNS = ("row", "pairID", "block", "heuristic_inferred", "subcase_inferred", "label")
SAMPLE_LABELS = {"0": ENTAILMENT, "1": NON_ENTAILMENT}

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
