"""Entity-level precision, recall and micro F1 of sequence labelling, and token accuracy.

Entities are read from tag sequences as the CoNLL-2000 ``conlleval`` script reads them, which is the default
(non-strict) mode of ``seqeval.metrics`` that Hugging Face ``run_ner`` reports: a chunk starts at a ``B-``
tag, at an ``I-`` tag after ``O`` or after another type (so the ill-formed ``O I-PER`` still holds a ``PER``
entity), and ends where the next tag cannot continue it. An entity is ``(type, first word, last word)``; a
predicted entity is correct when the gold sequence has exactly the same one. Micro averages count over all
types: precision = correct / predicted, recall = correct / gold, F1 = 2PR / (P + R), 0 when undefined
(seqeval's ``zero_division`` default gives 0 too). Tests check equality with ``seqeval`` on hand-made and
random sequences.

:class:`EntityF1` keeps integer counts, so torchmetrics sums them exactly across DDP ranks.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torchmetrics import Metric


def _split_tag(tag: str) -> tuple[str, str]:
    """``B-PER`` -> (``B``, ``PER``); ``O`` -> (``O``, ``_``), as seqeval splits IOB tags."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _chunk_ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's endOfChunk: whether the chunk open at the previous tag ends before this one."""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _chunk_starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's startOfChunk: whether a chunk starts at this tag."""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities ``(type, first, last)`` (inclusive word positions) of one sentence's tag sequence."""
    found, prev_tag, prev_type, begin = set(), "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        marker, type_ = _split_tag(tag)
        if _chunk_ends(prev_tag, marker, prev_type, type_):
            found.add((prev_type, begin, i - 1))
        if _chunk_starts(prev_tag, marker, prev_type, type_):
            begin = i
        prev_tag, prev_type = marker, type_
    return found


def entity_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> tuple[int, int, int]:
    """``(correct, predicted, gold)`` entity counts over sentences (each a pair of equally long tag lists)."""
    correct = n_pred = n_gold = 0
    for g, p in zip(gold, predicted, strict=True):
        if len(g) != len(p):
            raise ValueError(f"a gold sentence has {len(g)} tags, its prediction {len(p)}")
        g_set, p_set = entities(g), entities(p)
        correct += len(g_set & p_set)
        n_pred += len(p_set)
        n_gold += len(g_set)
    return correct, n_pred, n_gold


def scores_from_counts(correct: float, n_pred: float, n_gold: float) -> dict[str, float]:
    """Micro precision, recall and F1 from entity counts (0 where a denominator is 0)."""
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level micro ``precision``, ``recall``, ``f1`` (seqeval default mode) and word ``accuracy``."""
    correct_words = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    words = sum(len(g) for g in gold)
    return {**scores_from_counts(*entity_counts(gold, predicted)), "accuracy": correct_words / words if words else 0.0}


class EntityF1(Metric):
    """torchmetrics state of sequence-labelling scores: entity counts and word counts, summed across ranks.

    ``update(gold, predicted)`` takes lists of sentences, each a list of tag strings; ``compute()`` returns
    ``{"f1", "precision", "recall", "accuracy"}`` as 0-d tensors (``accuracy`` is word accuracy: every gold word
    counts, a word without a prediction is predicted ``O``).
    """

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in ("correct", "predicted", "gold", "words_correct", "words"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> None:
        correct, n_pred, n_gold = entity_counts(gold, predicted)
        self.correct += correct
        self.predicted += n_pred
        self.gold += n_gold
        self.words_correct += sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
        self.words += sum(len(g) for g in gold)

    def compute(self) -> dict[str, torch.Tensor]:
        scores = scores_from_counts(int(self.correct), int(self.predicted), int(self.gold))
        scores["accuracy"] = int(self.words_correct) / int(self.words) if int(self.words) else 0.0
        return {name: torch.tensor(value, dtype=torch.float64) for name, value in scores.items()}
