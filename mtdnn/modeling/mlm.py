"""The masked-language-model head, SpanBERT's span boundary objective, their loss and dev metrics.

MLM head (BERT, arXiv 1810.04805; the ``BertLMPredictionHead`` layout): for each predicted token's final hidden
state x_i ``(d,)``::

    h_i = LayerNorm(GeLU(W x_i + b))            transform (d -> d)
    z_i = E h_i + c                              logits over the vocabulary (V,), E the encoder's input embeddings

The output projection E ``(V, d)`` is tied to the encoder's input embeddings (Press and Wolf 2017, as BERT):
it is read from the encoder at every call, never copied, so the head adds only W, b, the layer norm and the
bias c.

Span boundary objective (SpanBERT, Joshi et al. 2020, arXiv 1907.10529 section 3.2, eq. 1-2): each token x_i of
a masked span (s, e) is also predicted from the states of the span's boundary tokens x_{s-1}, x_{e+1} and a
relative position embedding p_{i-s+1}::

    h_0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]          (3d,)
    h_1 = LayerNorm(GeLU(W_1 h_0))               (d,)
    y_i = LayerNorm(GeLU(W_2 h_1))               (d,)
    z'_i = E y_i + c'                            logits over the vocabulary, the same tied projection

and the loss adds the two cross-entropies: L(x_i) = -log P(x_i | x_i's state) - log P(x_i | y_i).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from ..tasks.taskdef import TaskDef

MAX_SPAN_OFFSET = 64  # relative positions beyond this share the last embedding (spans are at most 10 words)


class MlmHead(nn.Module):
    """Logits over the vocabulary at the predicted positions; with ``sbo`` also the span-boundary predictions.

    Args:
        task: an ``mlm`` task (``masking.sbo`` adds the span boundary objective).
        hidden_size: d. vocab_size: V, the rows of the encoder's input embeddings.
    """

    tied_to_input_embeddings = True  # MultiTaskModel passes the encoder's input embedding matrix as `embeddings`

    def __init__(self, task: TaskDef, hidden_size: int, vocab_size: int):
        super().__init__()
        self.transform = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.GELU(), nn.LayerNorm(hidden_size))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.sbo = None
        if task.masking_spec.sbo:
            self.position = nn.Embedding(MAX_SPAN_OFFSET, hidden_size)
            self.sbo = nn.Sequential(nn.Linear(3 * hidden_size, hidden_size), nn.GELU(), nn.LayerNorm(hidden_size),
                                     nn.Linear(hidden_size, hidden_size), nn.GELU(), nn.LayerNorm(hidden_size))
            self.sbo_bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None,
                mlm_positions: torch.Tensor, embeddings: torch.Tensor, span_boundaries: torch.Tensor | None = None,
                span_offsets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(m, V)`` of the m predicted tokens (row-major order of ``mlm_positions``), or ``(m, 2, V)``
        with SBO (MLM logits first, then the span-boundary logits).

        Args:
            hidden: ``(batch, seq_len, d)``. mlm_positions: ``(batch, seq_len)`` bool.
            embeddings: ``(V, d)``, the encoder's input embeddings (the tied output projection).
            span_boundaries: ``(m, 2)`` token positions s-1 and e+1 of each predicted token's span (SBO).
            span_offsets: ``(m,)`` i - s, the token's position inside its span (SBO).
        """
        states = hidden[mlm_positions]                                          # (m, d)
        logits = F.linear(self.transform(states), embeddings, self.bias)       # (m, V)
        if self.sbo is None:
            return logits
        rows = mlm_positions.nonzero()[:, 0]                                    # (m,)
        left = hidden[rows, span_boundaries[:, 0].clamp(min=0)]                 # x_{s-1} (m, d)
        right = hidden[rows, span_boundaries[:, 1].clamp(max=hidden.shape[1] - 1)]  # x_{e+1} (m, d)
        position = self.position(span_offsets.clamp(max=MAX_SPAN_OFFSET - 1))  # p_{i-s+1} (m, d)
        y = self.sbo(torch.cat([left, right, position], dim=-1))               # (m, d)
        sbo_logits = F.linear(y, embeddings, self.sbo_bias)                     # (m, V)
        return torch.stack([logits, sbo_logits], dim=1)


def mlm_head(task: TaskDef, encoder: nn.Module) -> MlmHead:
    """:class:`MlmHead` sized to the encoder (hidden size, vocabulary of its input embeddings)."""
    return MlmHead(task, encoder.config.hidden_size, encoder.get_input_embeddings().num_embeddings)


def mlm_cross_entropy(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                      normalizer: float) -> torch.Tensor:
    """MLM loss: per example, the mean cross-entropy over its predicted tokens (with SBO, the sum of the MLM and
    span-boundary cross-entropies per token, SpanBERT eq. 2); then ``sum_i w_i l_i / normalizer`` as every loss
    of :mod:`mtdnn.modeling.losses` (DDP-correct). An example with no predicted token contributes 0.

    ``outputs``: ``(m, V)`` or ``(m, 2, V)`` logits of the predicted tokens; ``labels``: ``(batch, seq_len)``,
    the original token where one is predicted, -100 elsewhere; ``weight``: ``(batch,)``.
    """
    predicted = labels != -100
    targets, rows = labels[predicted], predicted.nonzero()[:, 0]
    if outputs.dim() == 3:
        per_token = sum(F.cross_entropy(outputs[:, k].float(), targets, reduction="none") for k in range(2))
    else:
        per_token = F.cross_entropy(outputs.float(), targets, reduction="none")
    total = torch.zeros(labels.shape[0], device=labels.device).index_add(0, rows, per_token)
    count = predicted.sum(1).clamp(min=1)
    return ((total / count) * weight).sum() / normalizer


class MaskedTokenAccuracy(MeanMetric):
    """Dev metric ``masked_accuracy``: the fraction of predicted tokens whose argmax is the original token.
    ``update(logits (m, V), targets (m,))``; reduced across DDP ranks by torchmetrics."""

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:  # type: ignore[override]
        super().update((logits.argmax(-1) == targets).float())


class MaskedTokenLoss(MeanMetric):
    """Dev metric ``masked_loss``: the mean cross-entropy (nats) of the MLM logits over predicted tokens.
    ``update(logits (m, V), targets (m,))``."""

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:  # type: ignore[override]
        super().update(F.cross_entropy(logits.float(), targets, reduction="none"))
