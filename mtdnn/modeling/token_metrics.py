"""Dev metrics of the token-level task types, fed batch by batch from head outputs, reduced across DDP ranks.

- :class:`TaggingScores` (sequence labelling): each sentence's word tags are read from the argmax of its words'
  first pieces and scored entity by entity (:mod:`mtdnn.modeling.entity_metrics`); the counts are summed
  across ranks.
- :class:`SpanScores` (extractive QA): a question's windows may sit in different batches and, under DDP, on
  different ranks, so every window's start/end logits are kept (torchmetrics ``cat`` states, gathered across
  ranks by ``compute()``) and only then decoded (:mod:`mtdnn.modeling.span_decoding`) and scored with SQuAD
  v1.1's EM/F1 (:mod:`mtdnn.modeling.squad_metrics`). The windows' offsets, contexts and gold answers come
  from the tokenized split given to :meth:`SpanScores.attach`; ranks that scored no window still compute the
  same result. One metric returns both scores (the windows are decoded once).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torchmetrics import Metric

from .entity_metrics import entity_counts, scores_from_counts
from .span_decoding import decode_spans
from .token_heads import MASKED
from .squad_metrics import squad_scores


class TaggingScores(Metric):
    """One of the sequence-labelling scores (``key``: ``entity_f1``, ``entity_precision``, ``entity_recall`` or
    ``token_accuracy``), from tag ids; integer counts summed across ranks.

    ``update(predicted, gold)`` takes, per sentence, the tag ids of its scored words (each word's first piece,
    :func:`mtdnn.tasktypes.tagging.batches.first_piece_tags`, as Hugging Face ``run_ner`` scores them; a word that yields no
    piece or is cut by ``max_length`` is not scored).

    The states are named after ``key``: torchmetrics merges metrics with equal states into one compute group,
    but only on ranks that saw a batch, and a rank without dev batches would then sync a different number of
    states (a DDP hang).

    Args:
        labels: the task's tag names (tag id -> name).
        key: the score ``compute()`` returns.
    """

    KEYS = {"entity_f1": "f1", "entity_precision": "precision", "entity_recall": "recall",
            "token_accuracy": "accuracy"}
    COUNTS = ("correct", "predicted", "gold", "words_correct", "words")
    full_state_update = False

    def __init__(self, labels: list[str], key: str = "entity_f1", **kwargs):
        super().__init__(**kwargs)
        self.labels, self.key = list(labels), key
        for name in self.COUNTS:
            self.add_state(f"{key}_{name}", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def _count(self, name: str) -> torch.Tensor:
        return getattr(self, f"{self.key}_{name}")

    def update(self, predicted: list[list[int]], gold: list[list[int]]) -> None:
        gold_tags = [[self.labels[t] for t in g] for g in gold]
        predicted_tags = [[self.labels[t] for t in p] for p in predicted]
        counts = dict(zip(("correct", "predicted", "gold"), entity_counts(gold_tags, predicted_tags)))
        counts["words_correct"] = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
        counts["words"] = sum(len(g) for g in gold)
        for name, value in counts.items():
            setattr(self, f"{self.key}_{name}", self._count(name) + value)

    def compute(self) -> torch.Tensor:
        scores = scores_from_counts(*(int(self._count(n)) for n in ("correct", "predicted", "gold")))
        words = int(self._count("words"))
        scores["accuracy"] = int(self._count("words_correct")) / words if words else 0.0
        return torch.tensor(scores[self.KEYS[self.key]], dtype=torch.float64)


class SpanScores(Metric):
    """SQuAD v1.1 exact match and F1 of one extractive-QA task over whole questions, as fractions in [0, 1] (the
    official script prints 100 times these, :func:`~mtdnn.modeling.squad_metrics.squad_scores`): one metric for
    both, since both decode the same windows once.

    ``compute()`` returns ``{key: score}`` for each of ``keys``, in their order; in a ``MetricCollection`` the keys
    are the collection's result names (torchmetrics flattens a metric's dict).

    Args:
        keys: the scores returned, of ``exact_match`` and ``squad_f1`` (default both, F1 first).
        n_best: spans kept per question (the answer is the best).
        max_answer_length: the longest answer, in pieces.

    Raises:
        ValueError: a key that is neither ``exact_match`` nor ``squad_f1``, or no key.
    """

    KEYS = {"exact_match": "exact_match", "squad_f1": "f1"}  # metric name -> squad_scores key
    full_state_update = False

    def __init__(self, keys: Sequence[str] = ("squad_f1", "exact_match"), n_best: int = 20,
                 max_answer_length: int = 30, **kwargs):
        super().__init__(**kwargs)
        self.keys = tuple(keys)
        if not self.keys or any(k not in self.KEYS for k in self.keys):
            raise ValueError(f"SpanScores keys {self.keys}: expected one or both of {', '.join(self.KEYS)}")
        self.n_best, self.max_answer_length = n_best, max_answer_length
        self.split = None
        self.decoded: dict = {}
        # 1-d float states on every rank (torchmetrics gathers 1-d tensors of any length, even empty ones); one
        # SpanScores per task, its states named apart from other metrics' so that none shares its compute group
        for name in ("windows", "lengths", "logits"):
            self.add_state(f"span_{name}", default=[], dist_reduce_fx="cat")

    def attach(self, split) -> "SpanScores":
        """The tokenized split whose windows are scored (its ``offset_start``, ``offset_end``, ``example_id``,
        ``context`` and ``answers`` features)."""
        self.split = split
        return self

    def _state(self, name: str):
        return getattr(self, f"span_{name}")

    def update(self, logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> None:
        """Keep each real window's start/end logits.

        Args:
            logits: ``(n, seq_len, 2)``, padding positions at :data:`~mtdnn.modeling.token_heads.MASKED`.
            labels: ``(n, 3)``: gold start, gold end and the window's row in the split (``batch.labels``).
            weight: ``(n,)``; rows of weight 0 (DDP padding copies) are left out.
        """
        keep = weight > 0
        rows = logits[keep].float()
        lengths = (rows[..., 0] > MASKED / 2).sum(1)
        self._state("windows").append(labels[keep][:, 2].float())
        self._state("lengths").append(lengths.float())
        # each window's start logits then end logits, unpadded: 2 * length values
        self._state("logits").append(torch.cat([torch.cat([r[:n, 0], r[:n, 1]]) for r, n in zip(rows, lengths.tolist())])
                           if len(rows) else rows.new_zeros(0))

    def predictions(self) -> dict:
        """Question id -> :class:`~mtdnn.modeling.span_decoding.SpanPrediction` over every window of this process's
        state (after :meth:`compute`, :attr:`decoded` holds those of every rank's windows)."""
        if self.split is None:
            raise RuntimeError("SpanScores.attach(split) must be called before compute()")
        cat = lambda states: torch.cat([s.reshape(-1) for s in states]) if isinstance(states, list) else states  # noqa: E731
        windows = cat(self._state("windows")).long().tolist() if len(self._state("windows")) else []
        lengths = cat(self._state("lengths")).long().tolist() if len(self._state("lengths")) else []
        flat = cat(self._state("logits")) if len(self._state("logits")) else torch.zeros(0)
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

    def compute(self) -> dict[str, torch.Tensor]:
        """``{key: score}`` (float64 scalars; EM and/or F1) over every question of the attached split (states gathered
        from every rank first); also sets :attr:`decoded`, the question id -> prediction of the gathered windows."""
        self.decoded = self.predictions()
        predicted = {qid: p.text for qid, p in self.decoded.items()}
        features = self.split.features
        gold = {features["example_id"][w]: features["answers"][w] for w in range(len(self.split))}
        scores = squad_scores(predicted, gold)
        # as fractions, on the scale of the other tasks' metrics in the dev average (the official script: x 100)
        return {key: torch.tensor(scores[self.KEYS[key]] / 100.0, dtype=torch.float64) for key in self.keys}
