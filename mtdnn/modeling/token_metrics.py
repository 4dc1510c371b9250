"""Dev metrics of the token-level task types, fed batch by batch from head outputs, reduced across DDP ranks.

- :class:`TaggingScores` (sequence labelling): each sentence's word tags are read from the argmax of its first
  pieces (:func:`mtdnn.tasks.token_features.word_predictions`) and scored entity by entity
  (:mod:`mtdnn.modeling.entity_metrics`); the counts are summed across ranks.
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

from ..tasks.token_features import IGNORE, word_predictions
from .entity_metrics import EntityF1
from .span_decoding import decode_spans
from .squad_metrics import squad_scores

TAGGING_METRICS = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")
SPAN_METRICS = ("exact_match", "squad_f1")


class TaggingScores(EntityF1):
    """Entity P/R/F1 and word accuracy of one sequence-labelling task, from logits and batches.

    Args:
        labels: the task's tag names (tag id -> name).
    """

    def __init__(self, labels: list[str], **kwargs):
        super().__init__(**kwargs)
        self.labels = list(labels)
        self.outside = self.labels.index("O")

    def update_batch(self, logits: torch.Tensor, batch: dict) -> None:
        """Add a batch: ``logits`` ``(n, seq_len, tags)``; the batch's ``word_ids``, ``num_words``, ``tags`` and
        ``weight`` (rows of weight 0 are left out)."""
        pieces = logits.argmax(-1).tolist()
        word_ids, num_words = batch["word_ids"].tolist(), batch["num_words"].tolist()
        tags, weight = batch["tags"].tolist(), batch["weight"].tolist()
        gold, predicted = [], []
        for row in range(len(pieces)):
            if weight[row] <= 0:
                continue
            words = word_predictions(pieces[row], word_ids[row], num_words[row], self.outside)
            gold.append([self.labels[t] for t in tags[row][:num_words[row]] if t != IGNORE])
            predicted.append([self.labels[t] for t in words])
        self.update(gold, predicted)

    def compute(self) -> dict[str, torch.Tensor]:
        scores = super().compute()
        return {"entity_f1": scores["f1"], "entity_precision": scores["precision"],
                "entity_recall": scores["recall"], "token_accuracy": scores["accuracy"]}


class SpanScores(Metric):
    """SQuAD v1.1 exact match and F1 (percent) of one extractive-QA task over whole questions.

    Args:
        n_best: spans kept per question (the answer is the best).
        max_answer_length: the longest answer, in pieces.
    """

    full_state_update = False

    def __init__(self, n_best: int = 20, max_answer_length: int = 30, **kwargs):
        super().__init__(**kwargs)
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

    def update_batch(self, logits: torch.Tensor, batch: dict) -> None:
        """See :meth:`update` (the same name as :meth:`TaggingScores.update_batch`)."""
        self.update(logits, batch)

    def update(self, logits: torch.Tensor, batch: dict) -> None:
        """Keep each real window's start/end logits: ``logits`` ``(n, seq_len, 2)``, the batch's ``idx`` (window
        positions in the split), ``attention_mask`` and ``weight``."""
        keep = batch["weight"] > 0
        lengths = batch["attention_mask"][keep].sum(1)
        rows = logits[keep].float()
        self.windows.append(batch["idx"][keep].float())
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

    def compute(self) -> dict[str, torch.Tensor]:
        """EM and F1 over every question of the attached split (states gathered from every rank first); also
        sets :attr:`decoded`, the question id -> prediction of the gathered windows."""
        self.decoded = self.predictions()
        predicted = {qid: p.text for qid, p in self.decoded.items()}
        features = self.split.features
        gold = {features["example_id"][w]: features["answers"][w] for w in range(len(self.split))}
        scores = squad_scores(predicted, gold)
        return {"exact_match": torch.tensor(scores["exact_match"], dtype=torch.float64),
                "squad_f1": torch.tensor(scores["f1"], dtype=torch.float64)}
