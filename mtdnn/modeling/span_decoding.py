"""Extractive-QA post-processing: from every window's start/end logits to each question's answer span.

A span ``(i, j)`` of a window scores ``start_logits[i] + end_logits[j]`` (Devlin et al. 2019, arXiv 1810.04805,
section 4.2: the answer maximises S.T_i + E.T_j over j >= i). A span is valid when both pieces are context
pieces of the window (not question or special tokens) and ``0 <= j - i < max_answer_length``. Unlike the
Hugging Face ``run_qa`` post-processing, which only pairs the ``n_best`` highest starts with the ``n_best``
highest ends, every valid span is scored (``windows x pieces x max_answer_length`` sums in one tensor
operation, chunked), so the best valid span is never missed. Per question, the ``n_best`` best spans over all
of its windows are kept, with probabilities = softmax over their scores; the answer is the best one, cut from
the context by its pieces' character offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

NEG = float("-inf")


@dataclass
class SpanPrediction:
    """A question's predicted answer: text, character offsets ``[start, end)`` into its context, score, and the
    ``n_best`` list (dicts of text, start, end, score, probability), best first."""

    text: str
    start: int
    end: int
    score: float
    n_best: list[dict]


def window_best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, context: torch.Tensor, n_best: int,
                      max_answer_length: int, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``n_best`` best valid spans of each window.

    Args:
        start_logits, end_logits: ``(windows, pieces)`` float.
        context: ``(windows, pieces)`` bool, True for the context pieces (padding and question are False).
        n_best: spans kept per window.
        max_answer_length: the longest span, in pieces.

    Returns:
        ``(scores, starts, ends)``, each ``(windows, n_best)``; scores are ``-inf`` where a window has fewer
        valid spans.
    """
    windows, pieces = start_logits.shape
    if windows == 0:
        empty = torch.zeros((0, n_best), dtype=torch.long)
        return empty.float(), empty, empty
    width = min(max_answer_length, pieces)
    k = min(n_best, pieces * width)
    scores_out, starts_out, ends_out = [], [], []
    for s in range(0, windows, chunk):
        start = start_logits[s:s + chunk].float().masked_fill(~context[s:s + chunk], NEG)
        end = end_logits[s:s + chunk].float().masked_fill(~context[s:s + chunk], NEG)
        # end shifted by offset d: shifted[:, i, d] = end[:, i + d] (-inf past the window)
        padded = torch.cat([end, end.new_full((end.shape[0], width), NEG)], dim=1)
        shifted = padded.unfold(1, width, 1)[:, :pieces]  # (w, pieces, width)
        scores = (start.unsqueeze(-1) + shifted).flatten(1)  # (w, pieces * width)
        best, flat = scores.topk(k, dim=1)
        scores_out.append(best)
        starts_out.append(flat // width)
        ends_out.append(flat // width + flat % width)
    return torch.cat(scores_out), torch.cat(starts_out), torch.cat(ends_out)


def decode_spans(start_logits: Sequence[torch.Tensor], end_logits: Sequence[torch.Tensor],
                 offset_start: Sequence[Sequence[int]], offset_end: Sequence[Sequence[int]],
                 example_ids: Sequence[str], contexts: Mapping[str, str], n_best: int = 20,
                 max_answer_length: int = 30) -> dict[str, SpanPrediction]:
    """Each question's answer from all of its windows (see the module docstring).

    Args:
        start_logits, end_logits: per window, a ``(pieces,)`` tensor (windows may differ in length).
        offset_start, offset_end: per window, each piece's character offsets into the context (-1 outside it).
        example_ids: per window, its question id.
        contexts: question id -> context.

    Returns:
        question id -> :class:`SpanPrediction` (an empty answer at offset 0 when no window has a valid span).
    """
    windows = len(example_ids)
    pieces = max((len(x) for x in start_logits), default=1)
    start = torch.full((windows, pieces), NEG)
    end = torch.full((windows, pieces), NEG)
    context = torch.zeros((windows, pieces), dtype=torch.bool)
    for w in range(windows):
        n = len(start_logits[w])
        start[w, :n], end[w, :n] = start_logits[w], end_logits[w]
        context[w, :n] = torch.tensor(offset_start[w][:n]) >= 0
    scores, starts, ends = window_best_spans(start, end, context, n_best, max_answer_length)
    candidates: dict[str, list[tuple[float, int, int]]] = {qid: [] for qid in example_ids}
    for w, qid in enumerate(example_ids):
        for score, i, j in zip(scores[w].tolist(), starts[w].tolist(), ends[w].tolist()):
            if score == NEG:
                break
            candidates[qid].append((score, offset_start[w][i], offset_end[w][j]))
    predictions = {}
    for qid, spans in candidates.items():
        spans = sorted(spans, key=lambda c: -c[0])[:n_best]
        text = contexts[qid]
        if not spans:
            predictions[qid] = SpanPrediction("", 0, 0, NEG, [])
            continue
        probabilities = torch.tensor([c[0] for c in spans]).softmax(0).tolist()
        best = [{"text": text[a:b], "start": a, "end": b, "score": s, "probability": p}
                for (s, a, b), p in zip(spans, probabilities)]
        predictions[qid] = SpanPrediction(best[0]["text"], best[0]["start"], best[0]["end"], best[0]["score"], best)
    return predictions
