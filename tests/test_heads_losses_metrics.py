"""Heads, losses and the GLUE metrics (checked against scikit-learn and SciPy)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from mtdnn.errors import ConfigError
from mtdnn.modeling.heads import TaskHead, pool
from mtdnn.modeling.losses import cross_entropy, mse, ranking_cross_entropy, soft_cross_entropy
from mtdnn.modeling.metrics import average_score, build_metrics, compute_metrics, update_metrics
from mtdnn.tasks.taskdef import parse_tasks

BASE = {"splits": {"train": {"path": "x.tsv"}}, "label": "y"}


def make(kind, **extra):
    body = {**BASE, "type": kind, "text": ["a", "b"], **extra}
    if kind == "classification":
        body.setdefault("labels", ["n", "p", "q"])
    if kind == "ranking":
        body["candidates"] = ["c0", "c1", "c2", "c3"]
    return parse_tasks({"tasks": {"t": body}}, "mem")["t"]


def test_pooling_variants():
    hidden = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.equal(pool(hidden, mask, None, "cls"), hidden[:, 0])
    assert torch.allclose(pool(hidden, mask, None, "mean")[0], hidden[0, :2].mean(0))
    pooled = torch.ones(2, 4)
    assert torch.equal(pool(hidden, mask, pooled, "pooler"), pooled)
    with pytest.raises(ConfigError, match="no pooler"):
        pool(hidden, mask, None, "pooler")
    # last: the last real token; with left padding (XLNet) cls and last still find the first and last real token
    assert torch.equal(pool(hidden, mask, None, "last"), torch.stack([hidden[0, 1], hidden[1, 2]]))
    left = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert torch.equal(pool(hidden, left, None, "last"), hidden[:, 2])
    assert torch.equal(pool(hidden, left, None, "cls"), torch.stack([hidden[0, 1], hidden[1, 0]]))
    assert torch.allclose(pool(hidden, left, None, "mean")[0], hidden[0, 1:].mean(0))


@pytest.mark.parametrize("kind, shape", [("classification", (6, 3)), ("regression", (6,)), ("ranking", (6, 4))])
def test_head_output_shapes(kind, shape):
    head = TaskHead(make(kind, head={"pooling": "pooler"}), hidden_size=8)
    rows = 6 * (4 if kind == "ranking" else 1)
    out = head(torch.randn(rows, 5, 8), torch.ones(rows, 5), torch.randn(rows, 8))
    assert out.shape == shape


def test_losses_equal_torch_means_and_respect_weights():
    torch.manual_seed(0)
    logits, labels = torch.randn(5, 3), torch.tensor([0, 2, 1, 1, 0])
    ones = torch.ones(5)
    assert torch.allclose(cross_entropy(logits, labels, ones, 5.0), F.cross_entropy(logits, labels))
    scores, targets = torch.randn(5), torch.rand(5) * 5
    assert torch.allclose(mse(scores, targets, ones, 5.0), F.mse_loss(scores, targets))
    # a weight-0 example (DDP padding) does not count
    weight = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    assert torch.allclose(cross_entropy(logits, labels, weight, 4.0), F.cross_entropy(logits[:4], labels[:4]))
    # ranking: softmax over each group's candidates
    group_scores = torch.randn(3, 4)
    correct = torch.tensor([3, 0, 1])
    expected = -torch.log_softmax(group_scores, -1)[torch.arange(3), correct].mean()
    assert torch.allclose(ranking_cross_entropy(group_scores, correct, torch.ones(3), 3.0), expected)


def test_soft_cross_entropy_with_one_hot_targets_is_cross_entropy():
    logits, labels = torch.randn(4, 3), torch.tensor([2, 0, 1, 1])
    one_hot = F.one_hot(labels, 3).float()
    assert torch.allclose(soft_cross_entropy(logits, one_hot, 1.0), F.cross_entropy(logits, labels, reduction="none"))


def _run(task, outputs, labels):
    metrics = build_metrics(task)
    half = len(labels) // 2
    update_metrics(metrics, task.type, outputs[:half], labels[:half], torch.ones(half))
    update_metrics(metrics, task.type, outputs[half:], labels[half:], torch.ones(len(labels) - half))
    return compute_metrics(metrics)


def test_classification_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    labels = torch.tensor(rng.integers(0, 2, 200))
    logits = torch.tensor(rng.normal(size=(200, 2)), dtype=torch.float32) + 0.8 * F.one_hot(labels, 2)
    task = make("classification", labels=["0", "1"], metrics=["mcc", "accuracy", "f1"])
    scores = _run(task, logits, labels)
    preds = logits.argmax(-1).numpy()
    assert scores["accuracy"] == pytest.approx(accuracy_score(labels, preds), abs=1e-6)
    assert scores["f1"] == pytest.approx(f1_score(labels, preds, pos_label=1), abs=1e-6)
    assert scores["mcc"] == pytest.approx(matthews_corrcoef(labels, preds), abs=1e-6)
    # in the definition's order, the selection metric first (torchmetrics' MetricCollection sorts its keys)
    assert list(scores) == ["mcc", "accuracy", "f1"]


def test_three_class_accuracy_is_micro_averaged():
    labels = torch.tensor([0, 0, 0, 0, 1, 2])
    logits = F.one_hot(torch.tensor([0, 0, 0, 1, 1, 1]), 3).float()
    scores = _run(make("classification"), logits, labels)
    assert scores["accuracy"] == pytest.approx(4 / 6)  # macro would give (3/4 + 1 + 0) / 3


def test_regression_metrics_match_scipy():
    rng = np.random.default_rng(1)
    gold = torch.tensor(rng.uniform(0, 5, 300), dtype=torch.float32)
    pred = gold + torch.tensor(rng.normal(0, 1.5, 300), dtype=torch.float32)
    scores = _run(make("regression"), pred, gold)
    assert scores["pearson"] == pytest.approx(pearsonr(pred, gold)[0], abs=1e-5)
    assert scores["spearman"] == pytest.approx(spearmanr(pred, gold)[0], abs=1e-5)


def test_weight_zero_examples_are_left_out_of_metrics():
    task = make("classification", labels=["0", "1"])
    metrics = build_metrics(task)
    update_metrics(metrics, task.type, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0]),
                   torch.tensor([1.0, 0.0]))
    assert compute_metrics(metrics)["accuracy"] == 1.0


def test_nan_metric_counts_as_minus_one_in_the_average():
    with pytest.warns(UserWarning, match="NaN"):
        avg = average_score({"a": {"pearson": math.nan}, "b": {"accuracy": 0.5}}, {"a": ["pearson"], "b": ["accuracy"]})
    assert avg == pytest.approx((-1 + 0.5) / 2)
