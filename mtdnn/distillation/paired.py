"""Paired comparison of two training arms (distilled student against its gold-only continuation).

The analysis is fixed in advance. Both arms run with the same seeds (seed s of arm A is paired with seed s of
arm B: same start, same schedule, same data order), and are scored on the same dev examples:

- **paired t-interval over seeds**: d_s = score_A(s) - score_B(s); mean(d) +- t_{0.975, S-1} * sd(d) / sqrt(S)
  (Student's t; the two-sided 95% interval of the mean paired difference, computed by SciPy:
  ``scipy.stats.ttest_1samp(d, 0).confidence_interval(0.95)``, the interval ``scipy.stats.ttest_rel`` gives);
- **paired bootstrap over dev examples** (Efron and Tibshirani 1993; Koehn 2004 for NLP): R resamples of the dev
  examples with replacement, one index draw shared by both arms and all seeds; on each, the seed-averaged
  difference of the metric, recomputed on the resample (so non-decomposable metrics such as MCC or Pearson are
  handled exactly); the 2.5% and 97.5% percentiles of the R differences, and the share of resamples with a
  difference <= 0.

The metrics are vectorised over resamples (``(R, n)`` index matrices) so that 10,000 resamples of a GLUE dev set
take seconds.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
from scipy import stats

BOOTSTRAP_RESAMPLES = 10_000


def t_interval(differences: list[float], confidence: float = 0.95) -> dict:
    """Paired t-interval of the mean of ``differences`` (one per seed): Student's t, two-sided,
    ``scipy.stats.ttest_1samp(differences, 0).confidence_interval(confidence)`` (the interval of
    ``scipy.stats.ttest_rel`` on the two arms' paired scores).

    Returns:
        ``mean``, ``sd`` (sample, ddof 1), ``n``, ``low``, ``high`` (NaN ``sd`` and bounds with fewer than 2
        values; ``mean`` NaN with none).
    """
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return {"mean": mean, "sd": float("nan"), "n": n, "low": float("nan"), "high": float("nan")}
    with warnings.catch_warnings():  # equal differences (sd 0): SciPy warns of precision loss; the interval is [mean, mean]
        warnings.simplefilter("ignore", RuntimeWarning)
        interval = stats.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return {"mean": mean, "sd": float(d.std(ddof=1)), "n": n, "low": float(interval.low),
            "high": float(interval.high)}


# -------------------------------------------------------------- metrics vectorised over resamples: (R, n) -> (R,)

def _accuracy(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    return (pred == gold).mean(axis=1)


def _f1(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Binary F1 of class 1 (GLUE's MRPC/QQP F1)."""
    tp = ((pred == 1) & (gold == 1)).sum(1)
    fp = ((pred == 1) & (gold != 1)).sum(1)
    fn = ((pred != 1) & (gold == 1)).sum(1)
    denom = 2 * tp + fp + fn
    return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)


def _mcc(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Multi-class Matthews correlation (Gorodkin 2004; the binary MCC for two classes), 0 when undefined."""
    classes = int(max(pred.max(), gold.max())) + 1
    r, n = pred.shape
    conf = np.zeros((r, classes, classes))
    np.add.at(conf, (np.repeat(np.arange(r), n), gold.ravel(), pred.ravel()), 1)
    t_k, p_k = conf.sum(2), conf.sum(1)
    c = np.trace(conf, axis1=1, axis2=2)
    s = float(n)
    num = c * s - (t_k * p_k).sum(1)
    den = np.sqrt(s * s - (p_k * p_k).sum(1)) * np.sqrt(s * s - (t_k * t_k).sum(1))
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _pearson(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    x = pred - pred.mean(1, keepdims=True)
    y = gold - gold.mean(1, keepdims=True)
    den = np.sqrt((x * x).sum(1) * (y * y).sum(1))
    return np.where(den > 0, (x * y).sum(1) / np.where(den > 0, den, 1), 0.0)


def _spearman(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    return _pearson(stats.rankdata(pred, axis=1), stats.rankdata(gold, axis=1))


RESAMPLED_METRICS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "accuracy": _accuracy, "f1": _f1, "mcc": _mcc, "pearson": _pearson, "spearman": _spearman}


def resampled_metric(metric: str, predictions: np.ndarray, gold: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``metric`` of ``predictions`` against ``gold`` (both ``(n,)``; class ids or scores) on each row of
    ``index`` ``(R, n')``: ``(R,)``.

    Raises:
        KeyError: a metric without a resampled implementation.
    """
    return RESAMPLED_METRICS[metric](np.asarray(predictions)[index], np.asarray(gold)[index])


def paired_bootstrap(metric: str, arm_a: list[np.ndarray], arm_b: list[np.ndarray], gold: np.ndarray,
                     resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, chunk: int = 500) -> dict:
    """Paired bootstrap of the seed-averaged metric difference A - B over dev examples.

    Args:
        metric: a key of :data:`RESAMPLED_METRICS`.
        arm_a, arm_b: per seed, the ``(n,)`` predictions (class ids or scores) of each arm, seeds paired by
            position.
        gold: ``(n,)`` gold labels.
        resamples: R. seed: the resampling generator's seed (``numpy.random.default_rng``).
        chunk: resamples computed at once (memory ``chunk x n``).

    Returns:
        ``observed`` (the difference on the full set), ``low``, ``high`` (2.5% and 97.5% percentiles),
        ``p_not_better`` (share of resamples with difference <= 0), ``resamples``, ``seed``.
    """
    gold = np.asarray(gold)
    n = len(gold)
    full = np.arange(n)[None, :]
    observed = float(np.mean([resampled_metric(metric, a, gold, full)[0] - resampled_metric(metric, b, gold, full)[0]
                              for a, b in zip(arm_a, arm_b)]))
    rng = np.random.default_rng(seed)
    diffs = []
    for start in range(0, resamples, chunk):
        index = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        per_seed = [resampled_metric(metric, a, gold, index) - resampled_metric(metric, b, gold, index)
                    for a, b in zip(arm_a, arm_b)]
        diffs.append(np.mean(per_seed, axis=0))
    d = np.concatenate(diffs)
    return {"observed": observed, "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5)),
            "p_not_better": float((d <= 0).mean()), "resamples": resamples, "seed": seed}
