"""Exact match and F1 of extractive question answering, as SQuAD v1.1's official ``evaluate-v1.1.py`` computes
them (Rajpurkar et al. 2016, arXiv 1606.05250, section 6).

Answers are normalised (lower case; punctuation removed; the articles ``a``, ``an``, ``the`` removed as whole
words; whitespace collapsed). Exact match is 1 when the normalised prediction equals a normalised gold
answer; F1 is the harmonic mean of precision and recall of the bag of normalised words shared with a gold
answer, 0 when nothing is shared: an answer that normalises to nothing, such as ``The``, always scores 0 F1
(and exact match 1 only against a gold answer that also normalises to nothing). Each question takes the maximum over its gold answers; the scores are
means over questions, in percent (the official script reports 100 * mean).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Mapping, Sequence

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, remove punctuation, remove the articles a/an/the as words, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Word-overlap F1 of the normalised strings (0.0 when they share no word)."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """``{"exact_match", "f1"}`` in percent over every question of ``gold`` (a missing prediction scores 0).

    Args:
        predictions: question id -> predicted answer text.
        gold: question id -> the gold answer texts (at least one each).
    """
    em = f1_sum = 0.0
    for qid, answers in gold.items():
        if qid not in predictions:
            continue
        em += max(exact_match(predictions[qid], a) for a in answers)
        f1_sum += max(f1(predictions[qid], a) for a in answers)
    n = max(len(gold), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1_sum / n}
