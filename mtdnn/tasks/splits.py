"""Where a task's split comes from, as a task definition says it: a file under the data root (``path``, kept
inside the root), a ``datasets`` hub split (``hub``), rows carved from another split (``carve``), or the folds of
one (``folds``); exactly one per split (:class:`SplitSpec`)."""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..fileio import quote_prefix


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class HubSource(_Strict):
    """A split read from a ``datasets`` hub id (``load_dataset(path, name, split=split)``); needs a network."""

    path: str
    name: str | None = None
    split: str


class CarveSource(_Strict):
    """A split carved out of another split with a seeded permutation (e.g. a dev set for QQP's train subset).

    The first ``size`` rows of ``permutation(seed)`` of ``from_split`` form this split and are removed from it.
    ``by: article`` permutes a SQuAD file's articles instead of its rows: the questions of the first ``size``
    articles form this split (every question about one article stays on one side).
    """

    from_split: str
    size: int = Field(gt=0)
    seed: int = 0
    by: Literal["row", "article"] = "row"


def task_splits_source(splits: dict, split: str) -> str:
    """Which source a split is read from: path, hub, carve or folds."""
    spec = splits[split]
    return next(k for k in ("path", "hub", "carve", "folds") if getattr(spec, k) is not None)


class FoldSource(_Strict):
    """A split made of K seeded folds of another split, stratified by label (regression: the score rounded to an
    integer); see :func:`mtdnn.tasks.subsets.fold_assignment`. ``keep: in`` is fold ``fold`` (1-based) itself,
    ``keep: out`` every other row: the training set of the members whose outputs on fold ``fold`` are its
    out-of-fold soft targets (``cross_fit`` in a teacher spec writes these splits)."""

    from_split: str
    k: int = Field(ge=2)
    fold: int = Field(ge=1)
    keep: Literal["in", "out"]
    seed: int = 0

    @model_validator(mode="after")
    def _fold_in_range(self) -> "FoldSource":
        if self.fold > self.k:
            raise ValueError(f"fold {self.fold} is not one of the {self.k} folds (1..{self.k})")
        return self


class SplitSpec(_Strict):
    """Where one split's rows come from and how its file is parsed.

    Exactly one of ``path`` (a file under the data root), ``hub``, ``carve`` or ``folds`` is given.
    ``format``: tsv, csv, jsonl, or for the token-level types ``conll`` (one token a line, its fields named by
    ``columns``, :mod:`mtdnn.tasktypes.tagging.conll`) and ``squad`` (SQuAD v1.1 JSON, :mod:`mtdnn.tasktypes.spans.squad`). ``header``: whether the first line names the columns; without one,
    ``columns`` names them. ``quoting``: ``none`` (GLUE tsv: a ``"`` is an ordinary character) or ``csv``
    (fields may be quoted); defaults to none for tsv and csv for csv. ``id``: a column holding each row's id
    (GLUE test ``index``); otherwise the 0-based row number is the id.
    """

    path: str | None = None
    hub: HubSource | None = None
    carve: CarveSource | None = None
    folds: FoldSource | None = None
    format: Literal["tsv", "csv", "jsonl", "conll", "squad"] = "tsv"
    header: bool = True
    columns: list[str] | None = None
    quoting: Literal["none", "csv"] | None = None
    encoding: str = "utf-8-sig"
    id: str | None = None

    @field_validator("path")
    @classmethod
    def _inside_the_data_root(cls, value: str | None) -> str | None:
        if value is None:
            return value
        normal = posixpath.normpath(value.replace("\\", "/"))
        if normal.startswith("/") or re.match(r"[A-Za-z]:", normal):
            raise ValueError("an absolute path; paths are relative to the data root (--data-dir): put the file, or "
                             "a link to it, under the data root")
        if normal == ".." or normal.startswith("../"):
            raise ValueError("climbs out of the data root with '..'; paths are relative to the data root "
                             "(--data-dir) and stay inside it")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "SplitSpec":
        given = [k for k in ("path", "hub", "carve", "folds") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, hub, carve, folds (got {given or 'none'})")
        if self.path is not None and self.format == "conll" and not self.columns:
            raise ValueError("a conll file needs 'columns' (the names of a line's fields, in order)")
        if self.path is not None and self.format in ("tsv", "csv") and not self.header and not self.columns:
            raise ValueError("a file with header: false needs 'columns' (the column names, in order)")
        return self

    @property
    def resolved_quoting(self) -> str:
        """``none`` or ``csv``: the explicit ``quoting``, else none for tsv and csv for csv files."""
        if self.quoting is not None:
            return self.quoting
        return "csv" if self.format == "csv" else "none"
