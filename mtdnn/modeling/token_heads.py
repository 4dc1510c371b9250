"""Token-level heads and their losses: token classification (sequence labelling) and start/end span logits
(extractive QA), as BERT's fine-tuning sections describe them (Devlin et al. 2019, arXiv 1810.04805, 4.2 and
5.3).

Shapes: the encoder gives ``hidden`` ``(batch, seq_len, hidden_size)``. :class:`TokenClassificationHead`
returns tag logits ``(batch, seq_len, num_tags)``; :class:`SpanExtractionHead` returns start and end logits
stacked as ``(batch, seq_len, 2)`` (``[..., 0]`` start, ``[..., 1]`` end), with padding positions set to a large
negative value so that a softmax over a row ignores them.

Losses follow the toolkit's convention (:mod:`mtdnn.modeling.losses`): ``sum_i w_i l_i / normalizer`` over
examples, ``w_i`` 0 for DDP padding copies. For sequence labelling ``l_i`` is the mean cross-entropy over
the example's labelled pieces (first pieces of words); for span extraction it is
``(CE(start) + CE(end)) / 2`` (BERT's SQuAD loss).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..tasks.rows import IGNORE

MASKED = -1e4  # logit of padding positions (finite, so float16 and soft cross-entropy stay finite)


class TokenClassificationHead(nn.Module):
    """Dropout -> linear on every piece: ``hidden (batch, seq_len, hidden)`` -> ``(batch, seq_len, num_tags)``."""

    def __init__(self, hidden_size: int, num_tags: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_tags)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled=None,
                temperature: float | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        logits = self.out(self.dropout(hidden))
        return logits if temperature is None else (logits, logits.float() / temperature)


class SpanExtractionHead(nn.Module):
    """Linear ``hidden -> 2`` on every piece: start and end logits ``(batch, seq_len, 2)``, padding masked."""

    def __init__(self, hidden_size: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, 2)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled=None,
                temperature: float | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        logits = self.out(self.dropout(hidden)).masked_fill(attention_mask.unsqueeze(-1) == 0, MASKED)
        return logits if temperature is None else (logits, logits.float() / temperature)


def token_head(task, encoder: nn.Module) -> TokenClassificationHead:
    """The sequence-labelling head of ``task`` (one output per tag) on ``encoder``'s hidden size."""
    return TokenClassificationHead(encoder.config.hidden_size, len(task.labels), task.head.dropout)


def span_head(task, encoder: nn.Module) -> SpanExtractionHead:
    """The span-extraction head of ``task`` on ``encoder``'s hidden size."""
    return SpanExtractionHead(encoder.config.hidden_size, task.head.dropout)


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                        normalizer: float) -> torch.Tensor:
    """Sequence labelling: per example, the mean cross-entropy of ``logits`` ``(batch, seq_len, tags)`` against
    ``labels`` ``(batch, seq_len)`` over pieces whose label is not :data:`IGNORE`; reduced as every loss here."""
    per_piece = F.cross_entropy(logits.float().transpose(1, 2), labels.clamp(min=0), reduction="none")
    keep = (labels != IGNORE).float()
    per_example = (per_piece * keep).sum(1) / keep.sum(1).clamp(min=1.0)
    return (per_example * weight).sum() / normalizer


def token_cross_entropy_per_piece(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                                  normalizer: float) -> torch.Tensor:
    """Sequence labelling with every labelled piece of the batch weighted the same, as Hugging Face's
    ``*ForTokenClassification`` (``run_ner``) averages: the mean cross-entropy over all labelled pieces of the
    batch, where :func:`token_cross_entropy` averages per sentence first (short sentences then weigh more per piece).

    In the toolkit's per-example form, example i's loss is its summed piece cross-entropy times ``n / P`` (``n``
    real examples and ``P`` labelled pieces of real examples in this batch), reduced as every loss here. On one
    process (``normalizer = n``) that is exactly the batch's piece mean; under DDP each rank scales by its own
    ``n / P``, so the global mean is exact only when the ranks' pieces per example are equal. ``logits``
    ``(batch, seq_len, tags)``, ``labels`` ``(batch, seq_len)`` with :data:`IGNORE` on unlabelled pieces.
    """
    per_piece = F.cross_entropy(logits.float().transpose(1, 2), labels.clamp(min=0), reduction="none")
    keep = (labels != IGNORE).float()
    pieces = (keep.sum(1) * weight).sum().clamp(min=1.0)
    per_example = (per_piece * keep).sum(1) * (weight.sum() / pieces)
    return (per_example * weight).sum() / normalizer


def span_cross_entropy(logits: torch.Tensor, positions: torch.Tensor, weight: torch.Tensor,
                       normalizer: float) -> torch.Tensor:
    """Span extraction: ``(CE(start logits, start) + CE(end logits, end)) / 2`` per window.

    Args:
        logits: ``(batch, seq_len, 2)`` from :class:`SpanExtractionHead`.
        positions: ``(batch, 2)`` gold start and end piece (0, 0 when the answer is outside the window); a
            batch's ``(batch, 3)`` labels (a third column, the window's row) are accepted as they are.
    """
    start = F.cross_entropy(logits[..., 0].float(), positions[:, 0], reduction="none")
    end = F.cross_entropy(logits[..., 1].float(), positions[:, 1], reduction="none")
    return (((start + end) / 2) * weight).sum() / normalizer


def token_distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                            weight: torch.Tensor, normalizer: float, temperature: float = 1.0,
                            alpha: float = 0.5, student_tempered: torch.Tensor | None = None) -> torch.Tensor:
    """Knowledge distillation of sequence labelling: per labelled piece, soft cross-entropy to the teacher
    members' mean class distribution, mixed with the gold cross-entropy (Hinton et al. 2015, arXiv 1503.02531;
    the prediction-layer loss of DistilBERT, arXiv 1910.01108, and TinyBERT, arXiv 1909.10351 eq. 10, applied to
    each piece)::

        l = alpha * T^2 * ( - sum_c q_c log softmax(s / T)_c ) + (1 - alpha) * CE(s, gold),
        q = (1/M) sum_m softmax(z_m / T)

    averaged over the example's labelled pieces (``labels != IGNORE``: the first piece of each word; other
    pieces, special tokens and padding count for nothing, whatever the teacher's logits there).
    ``student_logits`` ``(batch, seq_len, tags)``, ``teacher_logits`` ``(batch, members, seq_len, tags)``,
    ``labels`` ``(batch, seq_len)``. ``student_tempered`` (the head's ``s / T``) is accepted for the uniform
    signature of a type's ``distillation_loss`` (:class:`mtdnn.tasks.types.TaskKind`); the token head's is exactly ``s / T``.
    """
    q = F.softmax(teacher_logits.float() / temperature, dim=-1).mean(dim=1)
    soft = -(q * F.log_softmax(student_logits.float() / temperature, dim=-1)).sum(-1)
    gold = F.cross_entropy(student_logits.float().transpose(1, 2), labels.clamp(min=0), reduction="none")
    keep = (labels != IGNORE).float()
    per_piece = alpha * temperature**2 * soft + (1.0 - alpha) * gold
    per_example = (per_piece * keep).sum(1) / keep.sum(1).clamp(min=1.0)
    return (per_example * weight).sum() / normalizer


def span_distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, positions: torch.Tensor,
                           weight: torch.Tensor, normalizer: float, temperature: float = 1.0,
                           alpha: float = 0.5, student_tempered: torch.Tensor | None = None) -> torch.Tensor:
    """Knowledge distillation of span extraction, on the start and on the end distributions over the window's
    pieces, as DistilBERT (Sanh et al. 2019, arXiv 1910.01108) and TinyBERT's prediction layer (Jiao et al.
    2020, arXiv 1909.10351, eq. 10) distil SQuAD::

        l = alpha * T^2 * (SCE(start) + SCE(end)) / 2 + (1 - alpha) * (CE(start) + CE(end)) / 2

    with SCE the soft cross-entropy to the members' mean softmax at temperature T, each distribution over the
    window's pieces. ``student_logits`` ``(batch, seq_len, 2)``, ``teacher_logits`` ``(batch, members, seq_len,
    2)`` (padding positions hold :data:`MASKED`, so q is 0 there), ``positions`` ``(batch, 2)`` (or the batch's
    ``(batch, 3)`` labels). ``student_tempered``: accepted for the uniform signature (the span head's is ``s / T``).
    """
    total = 0.0
    for side in (0, 1):
        s = student_logits[..., side].float()
        q = F.softmax(teacher_logits[..., side].float() / temperature, dim=-1).mean(dim=1)
        soft = -(q * F.log_softmax(s / temperature, dim=-1)).sum(-1)
        gold = F.cross_entropy(s, positions[:, side], reduction="none")
        total = total + (alpha * temperature**2 * soft + (1.0 - alpha) * gold) / 2
    return (total * weight).sum() / normalizer
