"""Per-task losses, computed per example and weighted so that DDP ranks add up to one global mean.

Every loss returns ``sum_i w_i * l_i / normalizer`` where ``w_i`` is 1 for a real example and 0 for a DDP
padding copy, and ``normalizer`` is the global number of real examples in the step's batch. On one process
this is the plain mean; on W ranks each rank's gradient is scaled by W (DDP averages gradients), so the sum
over ranks equals the one-process mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _reduce(per_example: torch.Tensor, weight: torch.Tensor, normalizer: float) -> torch.Tensor:
    return (per_example * weight).sum() / normalizer


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, normalizer: float) -> torch.Tensor:
    """Classification: cross-entropy of ``logits`` ``(batch, classes)`` against class ids ``(batch,)``."""
    return _reduce(F.cross_entropy(logits.float(), labels, reduction="none"), weight, normalizer)


def mse(scores: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, normalizer: float) -> torch.Tensor:
    """Regression: squared error of ``scores`` ``(batch,)`` against float ``targets`` ``(batch,)``."""
    return _reduce((scores.float() - targets.float()) ** 2, weight, normalizer)


def ranking_cross_entropy(scores: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                          normalizer: float) -> torch.Tensor:
    """Ranking: softmax over each group's candidate scores ``(groups, k)``, cross-entropy of the correct one.

    MT-DNN's pairwise ranking loss (arXiv 1901.11504, eq. 4): -log P(correct | group) with
    P = softmax(gamma * scores); here gamma is folded into the learned output layer.
    """
    return _reduce(F.cross_entropy(scores.float(), labels, reduction="none"), weight, normalizer)


def soft_cross_entropy(student_logits: torch.Tensor, soft_targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per-example soft cross-entropy ``-sum_c q_c log softmax(s / T)_c``, shape ``(batch,)``.

    ``soft_targets`` q ``(batch, classes)`` are probabilities (each row sums to 1), e.g. the mean of the teacher
    members' ``softmax(z_m / T)`` (Hinton et al. 2015, arXiv 1503.02531; MT-DNN-KD, arXiv 1904.09482 eq. 2).
    """
    return -(soft_targets * F.log_softmax(student_logits.float() / temperature, dim=-1)).sum(-1)


LOSSES = {"cross_entropy": cross_entropy, "mse": mse, "ranking_cross_entropy": ranking_cross_entropy}
