"""What soft targets carry: confidence, entropy, agreement with gold and calibration of a teacher ensemble.

MT-DNN-KD's soft targets are the ensemble's averaged class probabilities q = (1/M) sum_m softmax(z_m / T). A
student learns more from them than from gold labels only where they differ from one-hot gold labels, i.e. where
the ensemble is uncertain, and usefully so where it is calibrated. These summaries say, per task and split, how
far that holds:

- **mean maximum probability** and **mean entropy** (nats) of q: how far from one-hot the targets are;
- **agreement with gold**: the share of examples whose argmax of q is the gold label;
- **expected calibration error** (ECE; Guo et al. 2017, "On Calibration of Modern Neural Networks",
  arXiv 1706.04599, eq. 3): with the maximum probability split into 15 equal-width bins B_b,
  ECE = sum_b |B_b| / n * |acc(B_b) - conf(B_b)|, for every member and for the ensemble
  (computed with ``torchmetrics``' ``MulticlassCalibrationError``, L1 norm);
- for regression, the members' **spread** (per example, the standard deviation of their predictions, averaged)
  beside the ensemble's **absolute error**, and the correlation of the two over examples;
- optionally **temperature scaling** of the ensemble (Guo et al. 2017, section 4.2): one T > 0 divides every
  member's logits before the softmax; it is fitted by NLL on one seeded half of dev and reported on the other.

Train-split figures against dev-split figures show whether members are much more confident on the examples
they were fine-tuned on (so their train soft targets are close to the gold labels).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import multiclass_calibration_error

ECE_BINS = 15


def expected_calibration_error(probabilities: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """ECE of class probabilities (Guo et al. 2017, arXiv 1706.04599, eq. 3), equal-width bins on the maximum.

    Args:
        probabilities: ``(n, classes)``, rows summing to 1.
        labels: ``(n,)`` gold class ids.
        bins: the number of equal-width confidence bins over [0, 1].

    Returns:
        sum_b |B_b| / n * |accuracy(B_b) - mean confidence(B_b)|, in [0, 1].
    """

    classes = probabilities.shape[-1]
    return float(multiclass_calibration_error(probabilities.float(), labels.long(), num_classes=classes,
                                              n_bins=bins, norm="l1"))


def entropy(probabilities: torch.Tensor) -> torch.Tensor:
    """Per-row entropy in nats, ``(n, classes)`` -> ``(n,)`` (0 log 0 taken as 0)."""
    p = probabilities.float()
    return -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)


def classification_summary(member_logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> dict:
    """Soft-target summary of a classification (or ranking) ensemble on one split.

    Args:
        member_logits: ``(n, members, classes)`` the members' logits.
        labels: ``(n,)`` gold class ids.
        temperature: T of q = mean_m softmax(z_m / T).

    Returns:
        ``mean_max_probability``, ``mean_entropy`` (nats), ``agreement_with_gold``, ``ece`` (the ensemble's)
        and ``member_ece`` (one per member), ``examples``.
    """
    member_probs = F.softmax(member_logits.float() / temperature, dim=-1)
    q = member_probs.mean(dim=1)
    return {
        "examples": int(len(labels)),
        "mean_max_probability": float(q.max(-1).values.mean()),
        "mean_entropy": float(entropy(q).mean()),
        "agreement_with_gold": float((q.argmax(-1) == labels).float().mean()),
        "ece": expected_calibration_error(q, labels),
        "member_ece": [expected_calibration_error(member_probs[:, m], labels) for m in range(member_probs.shape[1])],
    }


def regression_summary(member_predictions: torch.Tensor, labels: torch.Tensor) -> dict:
    """Regression ensemble on one split: the members' spread against the ensemble's absolute error.

    Args:
        member_predictions: ``(n, members)`` or ``(n, members, 1)``.
        labels: ``(n,)`` gold scores.

    Returns:
        ``mean_member_spread`` (per-example sample sd over members, averaged), ``mean_absolute_error`` of the
        members' mean, ``spread_error_correlation`` (Pearson over examples; NaN when either is constant),
        ``examples``.
    """
    preds = member_predictions.float().reshape(len(labels), -1)
    spread = preds.std(dim=1, unbiased=True) if preds.shape[1] > 1 else torch.zeros(len(labels))
    error = (preds.mean(dim=1) - labels.float()).abs()
    corr = float("nan")
    if spread.std() > 0 and error.std() > 0:
        corr = float(torch.corrcoef(torch.stack([spread, error]))[0, 1])
    return {"examples": int(len(labels)), "mean_member_spread": float(spread.mean()),
            "mean_absolute_error": float(error.mean()), "spread_error_correlation": corr}


def ensemble_nll(member_logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """Mean negative log-likelihood (nats) of gold labels under q = mean_m softmax(z_m / T)."""
    q = F.softmax(member_logits.float() / temperature, dim=-1).mean(dim=1)
    return float(-q.gather(1, labels.long()[:, None]).clamp_min(1e-12).log().mean())


TEMPERATURE_RANGE = (0.05, 20.0)
"""The grid :func:`fit_temperature` searches (log-spaced): a T at either end is no fitted minimum."""


def fit_temperature(member_logits: torch.Tensor, labels: torch.Tensor, low: float = TEMPERATURE_RANGE[0],
                    high: float = TEMPERATURE_RANGE[1], steps: int = 400) -> float:
    """The T minimising :func:`ensemble_nll` on ``(member_logits, labels)``: a log-spaced grid search over
    [low, high] (a 1-D convex-in-practice problem; the grid keeps it deterministic and dependency-free)."""
    grid = torch.logspace(math.log10(low), math.log10(high), steps)
    losses = [ensemble_nll(member_logits, labels, float(t)) for t in grid]
    return float(grid[int(torch.tensor(losses).argmin())])


def temperature_scaling(member_logits: torch.Tensor, labels: torch.Tensor, seed: int = 0) -> dict:
    """Temperature scaling of the ensemble fitted on one seeded half of the rows and reported on the other.

    Args:
        member_logits: ``(n, members, classes)`` dev logits; labels ``(n,)``.
        seed: the split's seed (``torch.Generator``).

    Returns:
        ``temperature`` (fitted), ``at_bound`` (it is an end of :data:`TEMPERATURE_RANGE`: the NLL still falls
        beyond it, so it is no fitted minimum), ``fit_examples``, ``report_examples`` and, on the held-out half,
        ``ece`` and ``nll`` at T = 1 (``before``) and at the fitted T (``after``), and ``ece_worse`` (scaling raised
        the ECE: it lowers the NLL it was fitted on, not necessarily the ECE).
    """
    n = len(labels)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    fit, held = order[: n // 2], order[n // 2:]
    t = fit_temperature(member_logits[fit], labels[fit])
    out = {"temperature": t, "seed": seed, "fit_examples": int(len(fit)), "report_examples": int(len(held))}
    for name, temp in (("before", 1.0), ("after", t)):
        q = F.softmax(member_logits[held].float() / temp, dim=-1).mean(dim=1)
        out[name] = {"ece": expected_calibration_error(q, labels[held]),
                     "nll": ensemble_nll(member_logits[held], labels[held], temp)}
    low, high = TEMPERATURE_RANGE
    out["at_bound"] = bool(math.isclose(t, low, rel_tol=1e-5) or math.isclose(t, high, rel_tol=1e-5))
    out["ece_worse"] = bool(out["after"]["ece"] > out["before"]["ece"])
    return out
