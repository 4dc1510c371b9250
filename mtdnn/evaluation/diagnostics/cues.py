"""Cue statistics: which words (unigrams) and word pairs (bigrams) of a data set predict its labels on their own.

Two settings, each with the definition of its paper (stated again in every JSON and table this module writes):

- **Warrants** (ARCT, any ranking task with two candidates; Niven and Kao 2019, arXiv 1907.07355, section 3).
  For data point i let T_j(i) be the cues of candidate j (j = 0, 1) and y_i the correct candidate. For a cue k:
  applicability alpha_k = sum_i 1[k in T_j(i) and k not in T_(1-j)(i) for some j] (eq. 1: it occurs with one
  candidate but not the other); productivity pi_k = (applicable points where that j = y_i) / alpha_k (eq. 2);
  coverage xi_k = alpha_k / n (eq. 3).
- **Hypotheses** (NLI: one hypothesis, several labels; Gururangan et al. 2018, arXiv 1803.02324, section 3;
  Poliak et al. 2018). applicability = the number of examples whose hypothesis contains the cue; productivity =
  max over labels c of P(c | cue) = count(cue, c) / applicability (the arg max is reported as ``label``);
  coverage = applicability / n; PMI(cue, c) = log p(cue, c) / (p(cue) p(c)), with count(cue, c) = hypotheses of
  label c that contain the cue, each count smoothed by adding s (Gururangan et al.'s add-100, ``smoothing``).

Cues are lower-cased word tokens: runs of letters and digits, with the contraction ``n't`` split off as its own
token (``doesn't`` -> ``does n't``, as Penn-Treebank tokenizers do), or counted as ``not`` with
``negation_as_not``; punctuation is not a cue. Each example counts a cue once, however often it occurs in it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ...errors import ConfigError
from ...tables import markdown_table
from ...tasks.data import Example, load_split
from ...tasks.taskdef import TaskDef

_TOKEN = re.compile(r"n't|[^\W_]+(?=n't)|[^\W_]+")

WARRANT_DEFINITIONS = {
    "applicability": "data points where the cue occurs in exactly one of the two warrants (Niven and Kao 2019, "
                     "section 3, eq. 1)",
    "productivity": "share of the applicable data points where the warrant holding the cue is the correct one "
                    "(eq. 2)",
    "coverage": "applicability / n, n = data points of the split (eq. 3)",
}
HYPOTHESIS_DEFINITIONS = {
    "applicability": "examples whose hypothesis contains the cue",
    "productivity": "max over labels of P(label | cue) = count(cue, label) / applicability; 'label' is the arg max",
    "coverage": "applicability / n, n = examples of the split",
    "pmi": "PMI(cue, label) = log p(cue, label) / (p(cue) p(label)) over hypotheses containing the cue, each "
           "(cue, label) count plus the smoothing s (Gururangan et al. 2018, section 3: s = 100)",
}


def cue_tokens(text: str, negation_as_not: bool = False) -> list[str]:
    """Lower-cased word tokens of ``text``; ``n't`` is split off (``"Doesn't work."`` -> ``[does, n't, work]``),
    and becomes ``not`` when ``negation_as_not``."""
    tokens = _TOKEN.findall(text.lower())
    return [("not" if t == "n't" else t) for t in tokens] if negation_as_not else tokens


def cues_of(text: str, ngram: int, negation_as_not: bool = False) -> set[str]:
    """The set of ``ngram``-grams (1: words, 2: adjacent word pairs joined by a space) of ``text``."""
    tokens = cue_tokens(text, negation_as_not)
    return {" ".join(tokens[i:i + ngram]) for i in range(len(tokens) - ngram + 1)}


@dataclass
class CueStat:
    """One cue's statistics (see the module docstring for the definitions).

    ``label``: for hypothesis cues, the label of largest P(label | cue); for warrant cues, None. ``pmi``: PMI
    per label (hypothesis cues only). ``productive``: applicable examples the cue predicts correctly (warrants)
    or that carry ``label`` (hypotheses).
    """

    cue: str
    applicability: int
    productive: int
    productivity: float
    coverage: float
    label: str | None = None
    pmi: dict[str, float] = field(default_factory=dict)


def warrant_cue_stats(examples: Sequence[Example], ngram: int = 1, negation_as_not: bool = False,
                      applicability: str = "exclusive") -> dict[str, CueStat]:
    """Niven and Kao's applicability, productivity and coverage of every cue of two-candidate examples.

    Args:
        examples: ranking examples with ``candidates`` (exactly two texts) and ``label`` (0 or 1, the correct one).
        ngram: 1 (unigram cues) or 2 (bigram cues).
        negation_as_not: count the contraction ``n't`` as the cue ``not`` (see :func:`cue_tokens`).
        applicability: ``exclusive`` (eq. 1 as the paper states it: the cue is in exactly one warrant) or ``any``
            (the cue is in either warrant; productivity still needs it in the correct warrant only). ``any``,
            with ``negation_as_not`` on train+dev+test, gives the paper's Table 2 figures for "not" (coverage
            0.64, productivity 0.61); ``exclusive`` gives coverage 0.35 (see the README).

    Raises:
        ConfigError: an example does not have exactly two candidates, or has no label; an unknown
            ``applicability``.
    """
    if applicability not in ("exclusive", "any"):
        raise ConfigError(f"applicability {applicability!r}: expected exclusive or any")
    applicable: Counter[str] = Counter()
    productive: Counter[str] = Counter()
    for ex in examples:
        if not ex.candidates or len(ex.candidates) != 2 or ex.label is None:
            raise ConfigError(f"warrant cues need two candidates and a label per example (example {ex.id!r}, "
                              f"line {ex.line})")
        first = cues_of(ex.candidates[0], ngram, negation_as_not)
        second = cues_of(ex.candidates[1], ngram, negation_as_not)
        one_only = first ^ second  # in one warrant but not the other
        for cue in one_only if applicability == "exclusive" else first | second:
            applicable[cue] += 1
        for cue in one_only:
            productive[cue] += (0 if cue in first else 1) == int(ex.label)
    n = len(examples)
    return {cue: CueStat(cue, a, productive[cue], productive[cue] / a, a / n) for cue, a in applicable.items()}


def hypothesis_cue_stats(examples: Sequence[Example], labels: Sequence[str], ngram: int = 1,
                         smoothing: float = 100.0, negation_as_not: bool = False) -> dict[str, CueStat]:
    """Applicability, productivity, coverage and PMI per label of every cue of the examples' hypotheses.

    The hypothesis is ``text_b`` (the second text column), or ``text_a`` for single-text examples.
    PMI(cue, c) = log (n'(cue, c) N') / (n'(cue) n'(c)), where n'(cue, c) = count(cue, c) + s, n'(cue) and n'(c)
    are its sums over labels and cues, and N' the total (Gururangan et al. 2018, section 3, add-s smoothing).

    Args:
        examples: classification examples with class-id labels (``labels[label]`` is the name).
        labels: the task's label names, in class-id order.
        ngram: 1 or 2.
        smoothing: s, added to every (cue, label) count (0: none).
    """
    joint: dict[str, Counter[int]] = {}
    for ex in examples:
        if ex.label is None:
            raise ConfigError(f"hypothesis cues need labelled examples (example {ex.id!r}, line {ex.line})")
        for cue in cues_of(ex.text_b if ex.text_b is not None else ex.text_a, ngram, negation_as_not):
            joint.setdefault(cue, Counter())[int(ex.label)] += 1
    n, k = len(examples), len(labels)
    label_totals = [smoothing * len(joint) for _ in range(k)]
    for counts in joint.values():
        for c in range(k):
            label_totals[c] += counts[c]
    grand = sum(label_totals)
    stats = {}
    for cue, counts in joint.items():
        applicability = sum(counts.values())
        best = max(range(k), key=lambda c: counts[c])
        cue_total = applicability + smoothing * k
        pmi = {}
        for c in range(k):
            smoothed = counts[c] + smoothing
            pmi[labels[c]] = math.log(smoothed * grand / (cue_total * label_totals[c])) if smoothed > 0 else -math.inf
        stats[cue] = CueStat(cue, applicability, counts[best], counts[best] / applicability, applicability / n,
                             label=labels[best], pmi=pmi)
    return stats


def top_cues(stats: dict[str, CueStat], k: int, min_applicability: int, by: str = "productivity",
             label: str | None = None) -> list[CueStat]:
    """The ``k`` strongest cues with at least ``min_applicability`` examples.

    ``by``: ``productivity`` (ties: larger coverage first) or ``pmi`` (of ``label``).
    """
    pool = [s for s in stats.values() if s.applicability >= min_applicability]
    if by == "pmi":
        key = lambda s: (-s.pmi[label], -s.applicability, s.cue)  # noqa: E731
    else:
        key = lambda s: (-s.productivity, -s.coverage, s.cue)  # noqa: E731
    return sorted(pool, key=key)[:k]


def _plain(stat: CueStat) -> dict:
    """``stat`` as JSON-safe values: a PMI of -inf (no smoothing, cue never seen with the label) becomes None."""
    plain = asdict(stat)
    plain["pmi"] = {k: (v if math.isfinite(v) else None) for k, v in stat.pmi.items()}
    return plain


def cue_kind(task: TaskDef) -> str:
    """``warrants`` for a two-candidate ranking task, ``hypothesis`` for a classification task.

    Raises:
        ConfigError: any other task (regression, ranking over more than two candidates).
    """
    if task.kind.ranks_candidates and task.num_candidates == 2:
        return "warrants"
    if task.kind.classifies:
        return "hypothesis"
    raise ConfigError(f"task '{task.name}': cue statistics need a classification task or a ranking task with two "
                      f"candidates (it is {task.type} with {task.num_candidates} candidates)")


@dataclass
class CueSettings:
    """What :func:`cue_statistics` reports: ``top`` cues per table, among cues with ``min_applicability``
    examples; ``cues`` named cues always listed; ``smoothing`` for PMI; ``negation_as_not``: ``n't`` counts
    as ``not``; ``applicability`` of warrant cues: ``exclusive`` or ``any`` (see :func:`warrant_cue_stats`)."""

    top: int = 10
    min_applicability: int = 10
    cues: list[str] = field(default_factory=lambda: ["not", "n't", "no"])
    smoothing: float = 100.0
    negation_as_not: bool = False
    applicability: str = "exclusive"


def cue_statistics(task: TaskDef, splits: Iterable[str], data_dir: Path, settings: CueSettings) -> dict:
    """Cue tables of ``task`` on each split, as a JSON-ready dict (definitions included).

    A split named ``a+b`` pools the rows of splits ``a`` and ``b`` (e.g. ``train+dev+test``).

    Result: ``{"task", "kind", "definitions", "settings", "splits": {split: {"n", "source", "unigram": {...},
    "bigram": {...}}}}``; per n-gram: ``top`` (warrants: by productivity; hypotheses: ``top_by_label`` by PMI of
    each label, and ``top`` by productivity) and ``selected`` (the named cues, null when absent).

    Raises:
        ConfigError: see :func:`cue_kind`. DataError: a split is missing or malformed.
    """
    kind = cue_kind(task)
    definitions = dict(WARRANT_DEFINITIONS if kind == "warrants" else HYPOTHESIS_DEFINITIONS)
    if kind == "warrants" and settings.applicability == "any":
        definitions["applicability"] = ("data points where the cue occurs in either warrant (not eq. 1's 'one but "
                                        "not the other': --applicability any)")
        definitions["productivity"] = ("applicable data points where the cue is in the correct warrant only, "
                                       "divided by applicability")
    result = {"task": task.name, "kind": kind, "definitions": definitions,
              "settings": asdict(settings), "splits": {}}
    for split in splits:
        parts = [load_split(task, part, data_dir) for part in split.split("+")]
        examples = [ex for raw in parts for ex in raw.examples]
        entry = {"n": len(examples), "source": " + ".join(raw.source for raw in parts)}
        for ngram, name in ((1, "unigram"), (2, "bigram")):
            if kind == "warrants":
                stats = warrant_cue_stats(examples, ngram, settings.negation_as_not, settings.applicability)
            else:
                stats = hypothesis_cue_stats(examples, task.labels or [], ngram, settings.smoothing,
                                             settings.negation_as_not)
            table = {"top": [_plain(s) for s in top_cues(stats, settings.top, settings.min_applicability)]}
            if kind == "hypothesis":
                table["top_by_label"] = {
                    label: [_plain(s) for s in top_cues(stats, settings.top, settings.min_applicability, "pmi", label)]
                    for label in task.labels or []}
            table["selected"] = {c: _plain(stats[c]) if c in stats else None
                                 for c in settings.cues if len(c.split()) == ngram}
            entry[name] = table
        result["splits"][split] = entry
    return result


def _row(stat: dict, kind: str, label: str | None = None) -> list[str]:
    cells = [f"`{stat['cue']}`", str(stat["applicability"]), f"{stat['productivity']:.3f}", f"{stat['coverage']:.3f}"]
    if kind == "hypothesis":
        pmi = stat["pmi"][label or stat["label"]]
        cells += [stat["label"], "-inf" if pmi is None else f"{pmi:.3f}"]
    return cells


def format_cue_tables(result: dict) -> str:
    """Markdown tables of a :func:`cue_statistics` result, each column's definition stated above them."""
    kind = result["kind"]
    lines = [f"Cue statistics of task `{result['task']}` ({'the two warrants' if kind == 'warrants' else 'hypotheses'}).",
             "", "Columns:"]
    lines += [f"- **{name}**: {text}" for name, text in result["definitions"].items()]
    if result["settings"]["negation_as_not"]:
        lines.append("- the contraction `n't` is counted as the cue `not`")
    header, align = ["cue", "applicability", "productivity", "coverage"], "lrrr"
    by_label = header
    if kind == "hypothesis":
        header, align = header + ["label", "PMI with label"], align + "lr"
        by_label = by_label + ["label", "PMI with the table's label"]
    settings = result["settings"]
    for split, entry in result["splits"].items():
        for ngram in ("unigram", "bigram"):
            table = entry[ngram]
            lines += ["", f"**{split}** (n = {entry['n']}), {ngram} cues, top {settings['top']} by productivity "
                      f"(applicability >= {settings['min_applicability']}):", ""]
            lines += markdown_table(header, [_row(s, kind) for s in table["top"]], align)
            for label, rows in table.get("top_by_label", {}).items():
                lines += ["", f"**{split}**, {ngram} cues of label `{label}`, top {settings['top']} by PMI "
                          f"(smoothing {settings['smoothing']:g}):", ""]
                lines += markdown_table(by_label, [_row(s, kind, label) for s in rows], align)
            selected = [(c, s) for c, s in table["selected"].items()]
            if selected:
                lines += ["", f"**{split}**, named {ngram} cues:", ""]
                absent = ["0", "-", "0.000"] + (["-", "-"] if kind == "hypothesis" else [])  # a cue never seen
                lines += markdown_table(header, [_row(stat, kind) if stat else [f"`{cue}`"] + absent
                                                 for cue, stat in selected], align)
    return "\n".join(lines) + "\n"
