"""Dev metrics of the token-level task types, fed batch by batch from head outputs, reduced across DDP ranks.

- :class:`TaggingScores` (sequence labelling): each sentence's word tags are read from the argmax of its words'
  first pieces and scored entity by entity (:mod:`mtdnn.modeling.entity_metrics`); the counts are summed
  across ranks.
- :class:`SpanScores` (extractive QA): a question's windows may sit in different batches and, under DDP, on
  different ranks, so every window's start/end logits are kept (torchmetrics ``cat`` states, gathered across
  ranks by ``compute()``) and only then decoded (:mod:`mtdnn.modeling.span_decoding`) and scored with SQuAD
  v1.1's EM/F1 (:mod:`mtdnn.modeling.squad_metrics`). The windows' offsets, contexts and gold answers come
  from the tokenized split given to :meth:`SpanScores.attach`; ranks that scored no window still compute the
  same result.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

from .entity_metrics import EntityF1
from .span_decoding import decode_spans
from .token_heads import MASKED
from .squad_metrics import squad_scores



class TaggingScores(EntityF1):
    """One of the sequence-labelling scores (``key``: ``entity_f1``, ``entity_precision``, ``entity_recall`` or
    ``token_accuracy``), from tag ids.

    ``update(predicted, gold)`` takes, per sentence, the tag ids of its scored words (each word's first piece,
    :func:`mtdnn.tasks.token.first_piece_tags`, as Hugging Face ``run_ner`` scores them; a word that yields no
    piece or is cut by ``max_length`` is not scored).

    Args:
        labels: the task's tag names (tag id -> name).
        key: the score ``compute()`` returns.
    """

    KEYS = {"entity_f1": "f1", "entity_precision": "precision", "entity_recall": "recall",
            "token_accuracy": "accuracy"}

    def __init__(self, labels: list[str], key: str = "entity_f1", **kwargs):
        super().__init__(**kwargs)
        self.labels, self.key = list(labels), key

    def update(self, predicted: list[list[int]], gold: list[list[int]]) -> None:
        super().update([[self.labels[t] for t in g] for g in gold], [[self.labels[t] for t in p] for p in predicted])

    def compute(self) -> torch.Tensor:
        return super().compute()[self.KEYS[self.key]]


class SpanScores(Metric):
    """SQuAD v1.1 exact match or F1 of one extractive-QA task over whole questions, as a fraction in [0, 1] (the
    official script prints 100 times these, :func:`~mtdnn.modeling.squad_metrics.squad_scores`).

    Args:
        key: ``exact_match`` or ``squad_f1``, the score ``compute()`` returns.
        n_best: spans kept per question (the answer is the best).
        max_answer_length: the longest answer, in pieces.
    """

    full_state_update = False

    def __init__(self, key: str = "squad_f1", n_best: int = 20, max_answer_length: int = 30, **kwargs):
        super().__init__(**kwargs)
        self.key = key
        self.n_best, self.max_answer_length = n_best, max_answer_length
        self.split = None
        self.decoded: dict = {}
        # 1-d float states on every rank (torchmetrics gathers 1-d tensors of any length, even empty ones)
        self.add_state("windows", default=[], dist_reduce_fx="cat")
        self.add_state("lengths", default=[], dist_reduce_fx="cat")
        self.add_state("logits", default=[], dist_reduce_fx="cat")

    def attach(self, split) -> "SpanScores":
        """The tokenized split whose windows are scored (its ``offset_start``, ``offset_end``, ``example_id``,
        ``context`` and ``answers`` features)."""
        self.split = split
        return self

    def update(self, logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> None:
        """Keep each real window's start/end logits.

        Args:
            logits: ``(n, seq_len, 2)``, padding positions at :data:`~mtdnn.modeling.token_heads.MASKED`.
            labels: ``(n, 3)``: gold start, gold end and the window's row in the split (``batch["labels"]``).
            weight: ``(n,)``; rows of weight 0 (DDP padding copies) are left out.
        """
        keep = weight > 0
        rows = logits[keep].float()
        lengths = (rows[..., 0] > MASKED / 2).sum(1)
        self.windows.append(labels[keep][:, 2].float())
        self.lengths.append(lengths.float())
        # each window's start logits then end logits, unpadded: 2 * length values
        self.logits.append(torch.cat([torch.cat([r[:n, 0], r[:n, 1]]) for r, n in zip(rows, lengths.tolist())])
                           if len(rows) else rows.new_zeros(0))

    def predictions(self) -> dict:
        """Question id -> :class:`~mtdnn.modeling.span_decoding.SpanPrediction` over every window of this process's
        state (after :meth:`compute`, :attr:`decoded` holds those of every rank's windows)."""
        if self.split is None:
            raise RuntimeError("SpanScores.attach(split) must be called before compute()")
        cat = lambda states: torch.cat([s.reshape(-1) for s in states]) if isinstance(states, list) else states  # noqa: E731
        windows = cat(self.windows).long().tolist() if len(self.windows) else []
        lengths = cat(self.lengths).long().tolist() if len(self.lengths) else []
        flat = cat(self.logits) if len(self.logits) else torch.zeros(0)
        features = self.split.features
        start_logits, end_logits, seen, position = [], [], set(), 0
        chosen = []
        for w, n in zip(windows, lengths):
            values = flat[position:position + 2 * n]
            position += 2 * n
            if w in seen:
                continue
            seen.add(w)
            chosen.append(w)
            start_logits.append(values[:n])
            end_logits.append(values[n:])
        contexts = {features["example_id"][w]: features["context"][w] for w in range(len(self.split))}
        return decode_spans(start_logits, end_logits, [features["offset_start"][w] for w in chosen],
                            [features["offset_end"][w] for w in chosen],
                            [features["example_id"][w] for w in chosen], contexts, self.n_best,
                            self.max_answer_length)

    def compute(self) -> torch.Tensor:
        """``key`` (EM or F1) over every question of the attached split (states gathered from every rank first); also
        sets :attr:`decoded`, the question id -> prediction of the gathered windows."""
        self.decoded = self.predictions()
        predicted = {qid: p.text for qid, p in self.decoded.items()}
        features = self.split.features
        gold = {features["example_id"][w]: features["answers"][w] for w in range(len(self.split))}
        scores = squad_scores(predicted, gold)
        # as a fraction, on the scale of the other tasks' metrics in the dev average (the official script: x 100)
        return torch.tensor(scores["exact_match" if self.key == "exact_match" else "f1"] / 100.0, dtype=torch.float64)
