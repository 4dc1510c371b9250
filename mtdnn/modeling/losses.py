"""Per-task losses, computed per example and weighted so that DDP ranks add up to one global mean.

Every loss returns ``sum_i w_i * l_i / normalizer`` where ``w_i`` is 1 for a real example and 0 for a DDP
padding copy, and ``normalizer`` is the global number of real examples in the step's batch. On one process
this is the plain mean; on W ranks each rank's gradient is scaled by W (DDP averages gradients), so the sum
over ranks equals the one-process mean. Each task type names the loss of its tasks (and of their distillation)
through :meth:`mtdnn.tasks.types.TaskKind.loss` and ``distillation_loss``; the token-level and MLM losses are in
:mod:`.token_heads` and :mod:`.mlm`.
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


# ----------------------------------------------------------------------------------------------- distillation
#
# MT-DNN-KD (Liu et al. 2019, arXiv 1904.09482): for each task an ensemble of M teacher members gives soft
# targets, the mean of their class probabilities; the student is trained on them together with the gold labels,
# with the temperature T and the T^2 scaling of Hinton et al. (2015, arXiv 1503.02531) and DistilBERT
# (Sanh et al. 2019, arXiv 1910.01108). Teacher outputs come as ``teacher_logits`` ``(batch, members, outputs)``:
# class logits z_m for classification (or candidate scores for ranking), predictions (outputs = 1) for regression.


def ensemble_probabilities(teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Soft targets q = (1/M) sum_m softmax(z_m / T): ``(batch, members, classes)`` -> ``(batch, classes)``.

    The members' *probabilities* are averaged (not their logits), as MT-DNN-KD (arXiv 1904.09482) describes.
    """
    return F.softmax(teacher_logits.float() / temperature, dim=-1).mean(dim=1)


def ensemble_prediction(teacher_predictions: torch.Tensor) -> torch.Tensor:
    """Regression: the members' mean prediction, ``(batch, members, 1)`` -> ``(batch,)``."""
    return teacher_predictions.float().mean(dim=1).squeeze(-1)


def distillation_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                               weight: torch.Tensor, normalizer: float, temperature: float = 1.0,
                               alpha: float = 0.5, student_tempered: torch.Tensor | None = None) -> torch.Tensor:
    """Knowledge-distillation loss of a classification (or ranking) task.

    Per example, with s the student's logits ``(batch, classes)`` and q = :func:`ensemble_probabilities` of
    ``teacher_logits`` ``(batch, members, classes)`` at temperature T::

        l = alpha * T^2 * ( - sum_c q_c log softmax(s / T)_c ) + (1 - alpha) * CE(s, gold)

    (Hinton et al. 2015, arXiv 1503.02531: the T^2 keeps the soft term's gradient scale independent of T; MT-DNN-KD,
    arXiv 1904.09482, uses T = 1.) The gradient of the soft term with respect to s is
    ``alpha * T * (softmax(s / T) - q)``. Reduced as every loss here: ``sum_i w_i l_i / normalizer``.

    ``student_tempered`` ``(batch, classes)``: when the head gives it, the soft term uses ``log_softmax`` of it in
    place of ``log_softmax(s / T)`` (SAN: log mean_k softmax(z^k / T), the temperature applied to each step's
    logits before averaging, :mod:`mtdnn.modeling.san`).
    """
    q = ensemble_probabilities(teacher_logits, temperature)
    if student_tempered is None:
        soft = soft_cross_entropy(student_logits, q, temperature)
    else:
        soft = soft_cross_entropy(student_tempered, q, 1.0)
    gold = F.cross_entropy(student_logits.float(), labels, reduction="none")
    return _reduce(alpha * temperature**2 * soft + (1.0 - alpha) * gold, weight, normalizer)


def distillation_mse(student_scores: torch.Tensor, teacher_predictions: torch.Tensor, targets: torch.Tensor,
                     weight: torch.Tensor, normalizer: float, temperature: float = 1.0,
                     alpha: float = 0.5, student_tempered: torch.Tensor | None = None) -> torch.Tensor:
    """Knowledge-distillation loss of a regression task: squared error to the members' mean prediction, mixed
    with the gold squared error, ``l = alpha * (s - mean_m p_m)^2 + (1 - alpha) * (s - y)^2``.

    ``student_scores`` ``(batch,)``, ``teacher_predictions`` ``(batch, members, 1)``, ``targets`` ``(batch,)``.
    The temperature does not apply to regression (it and ``student_tempered`` are accepted for a uniform
    signature).
    """
    scores = student_scores.float()
    soft = (scores - ensemble_prediction(teacher_predictions)) ** 2
    gold = (scores - targets.float()) ** 2
    return _reduce(alpha * soft + (1.0 - alpha) * gold, weight, normalizer)

