"""The CoNLL column format of sequence-labelling data (CoNLL-2003, WNUT-17), and BIO/IOB2 tag sets.

One token a line, its fields separated by a tab (WNUT-17: ``token<TAB>tag``) or by spaces (CoNLL-2003:
``token POS chunk NER``); a blank line (or one of whitespace only, as WNUT-17's train file has) ends a
sentence; ``-DOCSTART-`` lines separate documents and are skipped. A line holding a tab is split on tabs,
any other on runs of spaces, so a tab-separated token may contain spaces. The split's ``columns`` name the
fields in order; the task's ``text`` column holds the token and its ``label`` column the tag (so any column of
a multi-column file can be the tag column).

Tags are checked against the task's ``labels``, a BIO (IOB2) tag set: ``O`` and ``B-TYPE``/``I-TYPE`` pairs
(Ramshaw and Marcus 1995; Tjong Kim Sang and De Meulder 2003).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import DataError
from ...fileio import quote_prefix, undecodable_at

DOCSTART = "-DOCSTART-"


@dataclass
class TaggedSentence:
    """One sentence: its words and their tag ids (indices into the task's ``labels``; None when unlabelled).

    ``id`` is the 0-based sentence number in the file; ``line`` the 1-based line of its first word.
    """

    id: str
    line: int
    words: list[str]
    tags: list[int] | None = None

    @property
    def label(self) -> list[int] | None:
        """The row's label: its tag ids (None when unlabelled)."""
        return self.tags


def check_tag_set(labels: list[str]) -> None:
    """Check that ``labels`` is a BIO/IOB2 tag set: ``O`` plus ``B-T`` and ``I-T`` for every entity type ``T``.

    Raises:
        ValueError: naming the offending tag (the task definition turns it into a ConfigError).
    """
    if "O" not in labels:
        raise ValueError(f"a BIO tag set needs the outside tag 'O' (labels: {labels})")
    types = set()
    for tag in labels:
        if tag == "O":
            continue
        prefix, _, entity = tag.partition("-")
        if prefix not in ("B", "I") or not entity:
            raise ValueError(f"tag {tag!r} is not BIO: use O, B-<type> or I-<type>")
        types.add(entity)
    for entity in sorted(types):
        for prefix in ("B", "I"):
            if f"{prefix}-{entity}" not in labels:
                raise ValueError(f"tag '{prefix}-{entity}' is missing: a BIO tag set has both B- and I- of each type")


def entity_types(labels: list[str]) -> list[str]:
    """The entity types of a BIO tag set, in order of first appearance (``B-PER`` -> ``PER``)."""
    seen: list[str] = []
    for tag in labels:
        entity = tag.partition("-")[2]
        if entity and entity not in seen:
            seen.append(entity)
    return seen


def split_fields(line: str) -> list[str]:
    """The fields of one CoNLL line: split on tabs if it holds one, else on runs of spaces."""
    if "\t" in line:
        return line.split("\t")
    return [f for f in line.split(" ") if f]


def read_conll(path: Path, columns: list[str], token_column: str, tag_column: str | None, labels: list[str],
               task: str, encoding: str = "utf-8-sig") -> list[TaggedSentence]:
    """Read a CoNLL column file into sentences (see the module docstring for the format).

    Args:
        path: the file.
        columns: the names of the fields of a line, in order.
        token_column: the column holding the word.
        tag_column: the column holding the tag; None (or absent from ``columns``) reads an unlabelled file.
        labels: the task's tag set; tag ids index it.
        task: the task's name, for messages.

    Raises:
        DataError: naming the file, the 1-based line, the field and the value: a line with another number of
            fields, a tag not in the tag set, an empty token, text that is not in ``encoding``, or no sentence.
    """
    if token_column not in columns:
        raise DataError(f"{path}: task '{task}', field 'text': column '{token_column}' is not one of the split's "
                        f"columns ({', '.join(columns)})")
    word_at = columns.index(token_column)
    tag_at = columns.index(tag_column) if tag_column in columns else None
    tag_ids = {tag: i for i, tag in enumerate(labels)}
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[int] = []
    first_line = 0

    def close() -> None:
        if words:
            sentences.append(TaggedSentence(str(len(sentences)), first_line, list(words),
                                            list(tags) if tag_at is not None else None))
            words.clear()
            tags.clear()

    try:
        with path.open(encoding=encoding, newline="") as f:
            for number, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    close()
                    continue
                if line.startswith(DOCSTART):
                    close()
                    continue
                fields = split_fields(line)
                where = f"{path}: line {number}: task '{task}'"
                if len(fields) != len(columns):
                    raise DataError(f"{where}: expected {len(columns)} fields ({', '.join(columns)}), found "
                                    f"{len(fields)} (value: {quote_prefix(line)})")
                word = fields[word_at]
                if not word.strip():
                    raise DataError(f"{where}, field '{token_column}': empty token (value: {quote_prefix(line)})")
                if tag_at is not None:
                    tag = fields[tag_at].strip()
                    if tag not in tag_ids:
                        raise DataError(f"{where}, field '{tag_column}': tag {quote_prefix(tag)} is not in the task's "
                                        "tag set "
                                        f"({', '.join(labels)})")
                    tags.append(tag_ids[tag])
                if not words:
                    first_line = number
                words.append(word)
            close()
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid {encoding} text at {undecodable_at(path, encoding)} ({err.reason}; "
                        "set the split's 'encoding' field)") from None
    if not sentences:
        raise DataError(f"{path}: task '{task}': no sentences (expected one token a line, blank lines between "
                        "sentences)")
    return sentences
