"""Soft-target calibration summaries and the paired comparison's statistics, against hand-computed cases and SciPy."""

import math

import numpy as np
import pytest
import torch

from mtdnn.distillation.calibration import (classification_summary, ensemble_nll, entropy,
                                            expected_calibration_error, fit_temperature, regression_summary,
                                            temperature_scaling)
from mtdnn.distillation.paired import paired_bootstrap, resampled_metric, t_interval


def test_ece_against_a_hand_computed_case():
    # max probabilities 0.95, 0.92 (bin 14: [0.933.., 1.0) holds 0.95 only; 0.92 is in bin 13), 0.6, 0.55
    probs = torch.tensor([[0.95, 0.05], [0.92, 0.08], [0.4, 0.6], [0.55, 0.45]])
    labels = torch.tensor([0, 1, 1, 1])
    # bins of width 1/15: 0.95 -> bin 14 (acc 1, conf .95); 0.92 -> bin 13 (acc 0, conf .92);
    # 0.6 -> bin 9 ([.6, .667): acc 1, conf .6); 0.55 -> bin 8 (acc 0, conf .55)
    expected = (abs(1 - 0.95) + abs(0 - 0.92) + abs(1 - 0.6) + abs(0 - 0.55)) / 4
    assert expected_calibration_error(probs, labels) == pytest.approx(expected, abs=1e-6)
    # two examples sharing one bin: |mean acc - mean conf| of the bin, weighted by its share
    probs = torch.tensor([[0.91, 0.09], [0.9, 0.1]])
    assert expected_calibration_error(probs, torch.tensor([0, 1])) == pytest.approx(abs(0.5 - 0.905), abs=1e-6)


def test_classification_summary_values():
    # two members, three examples, two classes
    logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0]],
                           [[0.0, 3.0], [0.0, 1.0]],
                           [[1.0, 0.0], [0.0, 1.0]]])
    labels = torch.tensor([0, 1, 1])
    s = classification_summary(logits, labels)
    q = torch.softmax(logits, -1).mean(1)
    assert s["mean_max_probability"] == pytest.approx(float(q.max(-1).values.mean()))
    assert s["mean_entropy"] == pytest.approx(float(-(q * q.log()).sum(-1).mean()))
    assert s["agreement_with_gold"] == pytest.approx(2 / 3)  # the third example's q is [0.5, 0.5]: argmax 0
    assert len(s["member_ece"]) == 2
    assert float(entropy(torch.tensor([[1.0, 0.0]]))[0]) == 0.0
    assert float(entropy(torch.tensor([[0.5, 0.5]]))[0]) == pytest.approx(math.log(2))


def test_regression_summary():
    preds = torch.tensor([[1.0, 3.0], [2.0, 2.0], [0.0, 4.0]])
    labels = torch.tensor([2.0, 0.0, 2.0])
    s = regression_summary(preds, labels)
    assert s["mean_member_spread"] == pytest.approx((math.sqrt(2) + 0 + math.sqrt(8)) / 3)
    assert s["mean_absolute_error"] == pytest.approx((0 + 2 + 0) / 3)


def test_temperature_scaling_recovers_an_overconfident_ensemble():
    torch.manual_seed(0)
    n, classes = 4000, 3
    true_logits = torch.randn(n, classes) * 1.5
    labels = torch.distributions.Categorical(logits=true_logits).sample()
    members = torch.stack([true_logits * 3.0, true_logits * 3.0], dim=1)  # calibrated at T = 3
    assert fit_temperature(members, labels) == pytest.approx(3.0, rel=0.15)
    out = temperature_scaling(members, labels, seed=1)
    assert out["fit_examples"] + out["report_examples"] == n
    assert out["after"]["nll"] < out["before"]["nll"] and out["after"]["ece"] < out["before"]["ece"]
    assert ensemble_nll(members, labels, 3.0) < ensemble_nll(members, labels, 1.0)
    assert not out["at_bound"] and not out["ece_worse"]


def test_a_temperature_on_the_search_bound_and_a_worse_ece_are_flagged():
    from mtdnn.distillation.calibration import TEMPERATURE_RANGE
    from mtdnn.distillation.teacher_report import soft_target_markdown

    torch.manual_seed(0)
    n = 400
    labels = torch.randint(0, 2, (n,))
    members = (torch.randn(n, 2, 2) * 50.0)  # confident and unrelated to the labels: the NLL falls up to T = 20
    out = temperature_scaling(members, labels, seed=0)
    assert out["temperature"] == pytest.approx(TEMPERATURE_RANGE[1], rel=1e-5) and out["at_bound"]
    assert out["ece_worse"] == (out["after"]["ece"] > out["before"]["ece"])
    carried = {"temperature_scaling": {**out, "ece_worse": True}}
    text = "\n".join(soft_target_markdown({"rte": {"soft_targets": carried}}, lambda v: f"{v:.4f}"))
    assert f"| rte | {n // 2} / {n - n // 2} | 20.0000 (search bound) |" in text
    assert "(worse than at T = 1)" in text


def test_t_interval_equals_scipy():
    from scipy import stats

    a = np.array([0.66, 0.64, 0.67, 0.65, 0.68])
    b = np.array([0.65, 0.64, 0.655, 0.64, 0.66])
    ours = t_interval(list(a - b))
    ref = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert ours["low"] == pytest.approx(ref.low, abs=1e-12) and ours["high"] == pytest.approx(ref.high, abs=1e-12)
    assert math.isnan(t_interval([0.1])["low"])


def test_t_interval_of_equal_differences_is_their_value_without_a_warning(recwarn):
    out = t_interval([0.01, 0.01, 0.01])
    assert out["low"] == pytest.approx(0.01, abs=1e-15) and out["high"] == pytest.approx(0.01, abs=1e-15)
    assert out["sd"] == 0.0 and out["n"] == 3 and not [w for w in recwarn if w.category is RuntimeWarning]
    assert all(math.isnan(t_interval([])[k]) for k in ("mean", "sd", "low", "high"))


@pytest.mark.parametrize("metric", ["accuracy", "f1", "mcc", "pearson", "spearman"])
def test_resampled_metrics_equal_the_reference_on_each_resample(metric):
    from scipy import stats
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    n = 60
    if metric in ("pearson", "spearman"):
        gold, pred = rng.normal(size=n), rng.normal(size=n)
        pred = np.round(pred + gold, 1)  # ties for Spearman
        ref = {"pearson": lambda p, g: stats.pearsonr(p, g)[0], "spearman": lambda p, g: stats.spearmanr(p, g)[0]}
    else:
        classes = 3 if metric in ("accuracy", "mcc") else 2
        gold, pred = rng.integers(0, classes, n), rng.integers(0, classes, n)
        ref = {"accuracy": accuracy_score, "f1": lambda p, g: f1_score(g, p), "mcc": lambda p, g: matthews_corrcoef(g, p)}
    index = rng.integers(0, n, size=(7, n))
    ours = resampled_metric(metric, pred, gold, index)
    for r in range(7):
        p, g = pred[index[r]], gold[index[r]]
        expected = ref[metric](p, g) if metric in ("pearson", "spearman", "f1", "mcc") else ref[metric](g, p)
        assert ours[r] == pytest.approx(expected, abs=1e-9)


def test_paired_bootstrap_sees_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(1)
    n = 400
    gold = rng.integers(0, 2, n)
    better = [np.where(rng.random(n) < 0.85, gold, 1 - gold) for _ in range(3)]
    worse = [np.where(rng.random(n) < 0.70, gold, 1 - gold) for _ in range(3)]
    out = paired_bootstrap("accuracy", better, worse, gold, resamples=2000, seed=0)
    assert out["low"] > 0 and out["p_not_better"] < 0.01
    assert out["low"] <= out["observed"] <= out["high"]
    same = paired_bootstrap("accuracy", better, better, gold, resamples=500, seed=0)
    assert same["observed"] == 0 and same["low"] == 0 and same["high"] == 0
    # seeded: the same call gives the same interval
    assert paired_bootstrap("accuracy", better, worse, gold, resamples=2000, seed=0) == out


def test_comparison_analysis_per_task_and_average():
    from scipy import stats

    from mtdnn.distillation.comparison import analyse, render_markdown

    rng = np.random.default_rng(2)
    gold = {"rte": rng.integers(0, 2, 200), "stsb": rng.uniform(0, 5, 150)}
    metrics = {"rte": "accuracy", "stsb": "pearson"}
    preds = {}
    for arm, noise in (("distilled", 0.2), ("gold-only", 0.35)):
        preds[arm] = {s: {"rte": np.where(rng.random(200) < 1 - noise, gold["rte"], 1 - gold["rte"]),
                          "stsb": gold["stsb"] + rng.normal(0, 3 * noise, 150)} for s in (1, 2, 3)}
    out = analyse(preds, gold, metrics, resamples=1000)
    rte = out["tasks"]["rte"]
    expected = [float((preds["distilled"][s]["rte"] == gold["rte"]).mean()) for s in (1, 2, 3)]
    assert rte["distilled"]["per_seed"] == pytest.approx(expected)
    other = [float((preds["gold-only"][s]["rte"] == gold["rte"]).mean()) for s in (1, 2, 3)]
    ref = stats.ttest_rel(expected, other).confidence_interval(0.95)
    assert rte["difference"]["low"] == pytest.approx(ref.low) and rte["difference"]["high"] == pytest.approx(ref.high)
    stsb_a = [stats.pearsonr(preds["distilled"][s]["stsb"], gold["stsb"])[0] for s in (1, 2, 3)]
    assert out["tasks"]["stsb"]["distilled"]["per_seed"] == pytest.approx(stsb_a)
    avg = out["average"]
    assert avg["distilled"]["per_seed"] == pytest.approx([(x + y) / 2 for x, y in zip(expected, stsb_a)])
    assert avg["bootstrap"]["low"] <= avg["bootstrap"]["observed"] <= avg["bootstrap"]["high"]
    assert avg["bootstrap"]["low"] > 0  # a large, real difference
    table = render_markdown(out)
    assert "| rte | accuracy |" in table and "| **average** |" in table
    with pytest.raises(ValueError, match="different seeds"):
        analyse({"distilled": preds["distilled"], "gold-only": {1: preds["gold-only"][1]}}, gold, metrics)
