"""GLUE metric sets as torchmetrics collections, one per task, and the average used for model selection.

As GLUE defines them (Wang et al. 2019, arXiv 1804.07461): accuracy is micro-averaged (the fraction correct);
``f1`` is the binary F1 of class 1 (MRPC "equivalent", QQP "duplicate"); ``mcc`` is Matthews' correlation
coefficient (CoLA); ``pearson`` and ``spearman`` are correlations of predicted and gold scores (STS-B).
torchmetrics reduces the states across DDP ranks in ``compute()``.
"""

from __future__ import annotations

import math
import warnings

import torch
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryF1Score, MulticlassAccuracy, MulticlassMatthewsCorrCoef
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from ..tasks.taskdef import TaskDef


def build_metrics(task: TaskDef) -> MetricCollection:
    """The task's metrics, in the order listed in its definition (the first is the selection metric)."""
    classes = task.num_outputs if task.type == "classification" else task.num_candidates
    factories = {
        "accuracy": lambda: MulticlassAccuracy(num_classes=classes, average="micro"),
        "f1": lambda: BinaryF1Score(),
        "mcc": lambda: MulticlassMatthewsCorrCoef(num_classes=classes),
        "pearson": lambda: PearsonCorrCoef(),
        "spearman": lambda: SpearmanCorrCoef(),
    }
    return MetricCollection({name: factories[name]() for name in task.metric_names})


def predictions(task_type: str, outputs: torch.Tensor) -> torch.Tensor:
    """What the metrics compare with the labels: class (or candidate) ids ``(batch,)``, or scores ``(batch,)``."""
    return outputs.float() if task_type == "regression" else outputs.argmax(-1)


def update_metrics(metrics: MetricCollection, task_type: str, outputs: torch.Tensor, labels: torch.Tensor,
                   weight: torch.Tensor) -> None:
    """Add a batch to ``metrics``, leaving out weight-0 (padding) examples.

    Regression scores are accumulated in float64 (except on MPS, which has none): torchmetrics merges
    Pearson's running moments across DDP ranks, and in float32 that merge alone moves the result by ~1e-6.
    """
    keep = weight > 0
    preds, labels = predictions(task_type, outputs)[keep], labels[keep]
    if task_type == "regression" and preds.device.type != "mps":
        preds, labels = preds.double(), labels.double()
    metrics.update(preds, labels)


def compute_metrics(metrics: MetricCollection) -> dict[str, float]:
    """``{metric: value}`` as Python floats (NaN where undefined, e.g. Pearson on constant predictions)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics warns on constant inputs; the NaN is handled by the average
        return {name: float(value) for name, value in metrics.compute().items()}


def average_score(scores: dict[str, dict[str, float]], metric_names: dict[str, list[str]]) -> float:
    """Mean over tasks of each task's first listed metric; a NaN counts as -1 (with a warning)."""
    values = []
    for task, task_scores in scores.items():
        name = metric_names[task][0]
        value = task_scores[name]
        if math.isnan(value):
            warnings.warn(f"task '{task}': {name} is NaN (e.g. constant predictions); counted as -1 in the average")
            value = -1.0
        values.append(value)
    return sum(values) / len(values)
