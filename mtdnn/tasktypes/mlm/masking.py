"""Masking for masked-language-model (MLM) tasks: which tokens to predict, and what the encoder sees instead.

Strategies (``masking.strategy`` of an ``mlm`` task), named as the papers name them:

- ``static`` (BERT, Devlin et al. 2019, arXiv 1810.04805 section 3.1 and appendix A.1): ``rate`` of the tokens,
  chosen uniformly, one mask per example fixed by the seed. (BERT itself duplicated its data 10 times, each copy
  with its own mask, so that every sequence was seen with 10 masks over 40 epochs; here there is one copy.)
- ``dynamic`` (RoBERTa, Liu et al. 2019, arXiv 1907.11692 section 4.1): the same token-level choice, drawn anew
  every time an example is seen (every epoch).
- ``whole_word`` (BERT's whole-word-masking release): words in random order, all pieces of a word together,
  skipping a word that would exceed the budget, until ``rate`` of the tokens; new every epoch.
- ``span`` (SpanBERT, Joshi et al. 2020, arXiv 1907.10529 section 3.1): span lengths in words from a geometric
  distribution Geo(p = 0.2) truncated at 10 words and renormalised (mean 3.797 words), each span placed
  uniformly among the places where it fits without overlapping an earlier span, until ``rate`` of the tokens;
  new every epoch. (SpanBERT picks a random start and lets the span run over words already masked; placing
  it where it fits keeps every span its sampled length.)

The token-level and whole-word strategies mask ``floor(rate * n + u)`` of the n maskable tokens, u ~ U[0, 1)
(randomised rounding, as fairseq's RoBERTa masking), so the expected rate is exactly ``rate`` at any sequence
length. ``span`` keeps every span its sampled length instead of cutting the last one at the budget (as SpanBERT
does): with r tokens of budget left, it adds another span with probability min(1, r / t), t the expected tokens
of a span in this sequence (3.797 words times its tokens per word), deciding *before* the span's length is
drawn, so realised lengths follow the distribution above and the expected rate is ``rate`` up to the small
overshoot of a span added near the end.

Replacement (BERT's 80/10/10): a chosen token becomes the mask token with probability 0.8, a random token of the
vocabulary with 0.1, and stays unchanged with 0.1; ``span`` draws once per span and applies the choice to the
whole span (SpanBERT section 3.1). Every draw comes from a ``random.Random`` seeded by (seed, epoch, row), so
masks are reproducible and independent of batching, workers and resumption.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

from ...tasks.rows import IGNORE  # label of a token that is not predicted (the ``ignore_index`` of cross-entropy)

SPAN_P = 0.2
SPAN_MAX_WORDS = 10


def span_length_probabilities(p: float = SPAN_P, max_words: int = SPAN_MAX_WORDS) -> list[float]:
    """P(length = k) for k = 1..max_words: Geo(p) truncated at ``max_words`` and renormalised (SpanBERT)."""
    weights = [p * (1 - p) ** (k - 1) for k in range(1, max_words + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def words_of(word_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` of the words, from per-token word ids (-1: special token, never masked)."""
    words: list[tuple[int, int]] = []
    for i, w in enumerate(word_ids):
        if w < 0:
            continue
        if words and word_ids[words[-1][0]] == w and words[-1][1] == i:
            words[-1] = (words[-1][0], i + 1)
        else:
            words.append((i, i + 1))
    return words


def budget(n_tokens: int, rate: float, rng: random.Random) -> int:
    """``floor(rate * n_tokens + u)``, u ~ U[0, 1): expected value ``rate * n_tokens``."""
    return min(n_tokens, int(rate * n_tokens + rng.random()))


@dataclass
class Masked:
    """The masking of one sequence: ``spans`` of token positions ``[start, end)`` to predict (one token each for
    ``static``/``dynamic``, one word for ``whole_word``), ``span_words`` the words per span, the model's
    ``input_ids`` and ``labels`` (the original token at predicted positions, :data:`IGNORE` elsewhere)."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    span_words: list[int] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)


def choose_spans(word_ids: Sequence[int], strategy: str, rate: float, rng: random.Random) -> tuple[list, list]:
    """The spans to predict and their lengths in words (see the module docstring for each strategy)."""
    words = words_of(word_ids)
    if strategy == "span":
        return _span_masking(words, rate, rng)
    positions = [i for start, end in words for i in range(start, end)]
    n = budget(len(positions), rate, rng)
    if strategy in ("static", "dynamic"):
        chosen = sorted(rng.sample(positions, n))
        return [(i, i + 1) for i in chosen], [1] * len(chosen)
    if strategy == "whole_word":
        order = list(range(len(words)))
        rng.shuffle(order)
        spans, covered = [], 0
        for w in order:
            start, end = words[w]
            if covered + end - start > n:
                continue
            spans.append((start, end))
            covered += end - start
            if covered == n:
                break
        return sorted(spans), [1] * len(spans)
    raise ValueError(f"unknown masking strategy {strategy!r}")


def _span_masking(words: list[tuple[int, int]], rate: float, rng: random.Random) -> tuple[list, list]:
    lengths = list(range(1, SPAN_MAX_WORDS + 1))
    probabilities = span_length_probabilities()
    tokens_per_word = sum(e - s for s, e in words) / max(1, len(words))
    mean_span_tokens = sum(k * p for k, p in zip(lengths, probabilities)) * tokens_per_word
    goal = rate * sum(e - s for s, e in words)
    masked = [False] * len(words)
    spans, span_words, covered = [], [], 0
    while covered < goal:
        left = goal - covered
        if left < mean_span_tokens and rng.random() >= left / mean_span_tokens:
            break  # decided before the span's length is drawn: lengths stay SpanBERT's, the rate stays `rate`
        length = rng.choices(lengths, probabilities)[0]
        starts = _free_starts(masked, length)
        if not starts:  # no run of `length` unmasked words left
            break
        start = rng.choice(starts)
        for w in range(start, start + length):
            masked[w] = True
        spans.append((words[start][0], words[start + length - 1][1]))
        span_words.append(length)
        covered += words[start + length - 1][1] - words[start][0]
    order = sorted(range(len(spans)), key=lambda s: spans[s][0])
    return [spans[s] for s in order], [span_words[s] for s in order]


def _free_starts(masked: list[bool], length: int) -> list[int]:
    """The words where a span of ``length`` unmasked words can start (spans never overlap earlier ones)."""
    starts, run = [], 0
    for w, m in enumerate(masked):
        run = 0 if m else run + 1
        if run >= length:
            starts.append(w - length + 1)
    return starts


def mask_sequence(input_ids: Sequence[int], word_ids: Sequence[int], strategy: str, rate: float,
                  rng: random.Random, mask_token_id: int, vocab_size: int, special_ids: set[int]) -> Masked:
    """Choose what to predict in one sequence and apply BERT's 80/10/10 replacement (per span for ``span``).

    Args:
        input_ids: the sequence's token ids, special tokens included.
        word_ids: per token, the index of its word (-1 for special tokens).
        strategy, rate: see the module docstring.
        rng: the sequence's random stream (see :func:`rng_for`).
        mask_token_id, vocab_size, special_ids: of the tokenizer; random replacements avoid special tokens.
    """
    spans, span_words = choose_spans(word_ids, strategy, rate, rng)
    ids, labels = list(input_ids), [IGNORE] * len(input_ids)
    per_span = strategy == "span"
    for start, end in spans:
        draw = rng.random()
        for i in range(start, end):
            labels[i] = ids[i]
            if not per_span and i > start:
                draw = rng.random()
            if draw < 0.8:
                ids[i] = mask_token_id
            elif draw < 0.9:
                ids[i] = _random_token(rng, vocab_size, special_ids)
    return Masked(spans, span_words, ids, labels)


def _random_token(rng: random.Random, vocab_size: int, special_ids: set[int]) -> int:
    while True:
        token = rng.randrange(vocab_size)
        if token not in special_ids:
            return token


def rng_for(seed: int, epoch: int | None, row: int) -> random.Random:
    """The random stream of one row: fixed by ``(seed, row)`` when ``epoch`` is None (static masks, dev masks),
    else new for every epoch (dynamic masks)."""
    return random.Random(f"mtdnn-mlm:{seed}:{'fixed' if epoch is None else epoch}:{row}")
