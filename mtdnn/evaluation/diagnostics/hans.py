"""HANS (McCoy et al. 2019, "Right for the Wrong Reasons", arXiv 1902.01007): does an NLI model lean on the
lexical-overlap, subsequence and constituent heuristics?

    HANS file --open_hans (hans_file)--> HansFile (layout checked; rows streamed) --score_hans(predict, batch_size)-->
    counts per (heuristic, subcase, gold label) --summarise--> accuracy per heuristic x gold label, per
    subcase, overall --write_hans_outputs--> diagnose-hans.json + hans.png (grouped bars)

The two layouts read (released, sample) are described in :mod:`.hans_file`.

Predictions of a 3-class head count neutral and contradiction as non-entailment, as in the paper (section 4);
the mapping of a task's labels comes from their names or from ``--label-map``. Rows are read, tokenized and
scored one batch at a time, so the 30,000-row HANS set takes the memory of one batch.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ...errors import ConfigError
from ...fileio import write_json_atomic
from ...tables import markdown_table
from ...tasks.taskdef import TaskDef
from .hans_file import ENTAILMENT, GOLD_LABELS, HEURISTICS, NON_ENTAILMENT, HansExample, HansFile
from .outputs import claim_diagnose_dir
from .plots import grouped_bars

# Label names whose meaning is plain (lower-cased); anything else needs --label-map.
KNOWN_LABELS = {"entailment": ENTAILMENT, "entails": ENTAILMENT, "entailed": ENTAILMENT,
                "non-entailment": NON_ENTAILMENT, "non_entailment": NON_ENTAILMENT,
                "not_entailment": NON_ENTAILMENT, "not-entailment": NON_ENTAILMENT,
                "neutral": NON_ENTAILMENT, "contradiction": NON_ENTAILMENT}


Predictor = Callable[[Sequence[HansExample]], list[str]]
"""Maps a batch of examples to one prediction each, ``entailment`` or ``non-entailment``."""


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
    if not task.kind.classifies or len(task.text) != 2:
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
    # keeps torch out of import time: scoring with --rule and reading HANS files need none
    from ...tasks.data import Example
    from ...tasks.tokenized import tokenize_examples
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
    fmt = lambda c: "-" if c["accuracy"] is None else f"{c['accuracy']:.3f} ({c['n']})"  # noqa: E731
    rows = [[h, fmt(cells[ENTAILMENT]), fmt(cells[NON_ENTAILMENT]), fmt(cells["all"])]
            for h, cells in summary["by_heuristic"].items()]
    rows.append(["**overall**", None, None, fmt(summary["overall"])])
    lines = markdown_table(["heuristic", ENTAILMENT, NON_ENTAILMENT, "all"], rows, align="lrrr") + [""]
    lines += markdown_table(["subcase", "heuristic", "gold", "accuracy (n)"],
                            [[subcase, cell["heuristic"], cell["gold"], fmt(cell)]
                             for subcase, cell in summary["by_subcase"].items()], align="lllr")
    return "\n".join(lines) + "\n"


def write_hans_outputs(result: dict, output_dir: str | Path, stem: str = "diagnose-hans") -> dict[str, Path]:
    """Write ``<stem>.json`` (``result``) and ``<stem>.png`` (grouped bars: heuristic x gold label) atomically."""
    output_dir = Path(claim_diagnose_dir(output_dir))
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
