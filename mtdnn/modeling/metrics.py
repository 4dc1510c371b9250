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
from ..tasks.types import TASK_TYPES
from .mlm import MaskedTokenAccuracy, MaskedTokenLoss
from .token_metrics import SpanScores, TaggingScores


def _spearman() -> SpearmanCorrCoef:
    """Spearman's rho over the whole dev split; without torchmetrics' warning that it keeps every prediction
    (that is what a rank correlation needs; a dev split's scores are a few thousand floats)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*will save all targets and predictions in the buffer.*")
        return SpearmanCorrCoef()


METRICS = {
    "accuracy": lambda task: MulticlassAccuracy(num_classes=task.output_width, average="micro"),
    "f1": lambda task: BinaryF1Score(),
    "mcc": lambda task: MulticlassMatthewsCorrCoef(num_classes=task.output_width),
    "pearson": lambda task: PearsonCorrCoef(),
    "spearman": lambda task: _spearman(),
    "masked_accuracy": lambda task: MaskedTokenAccuracy(),
    "masked_loss": lambda task: MaskedTokenLoss(),
    **{name: (lambda key: lambda task: TaggingScores(task.labels, key))(name) for name in TaggingScores.KEYS},
    **{name: (lambda key: lambda task: SpanScores((key,), task.qa_spec.n_best, task.qa_spec.max_answer_length))(name)
       for name in SpanScores.KEYS},
}
"""Metric name (a task type's ``metrics``, :data:`mtdnn.tasks.types.TASK_TYPES`) -> factory of the torchmetrics
object for a task; classes are the task's ``output_width`` (labels, or candidates for ranking)."""


class TaskMetrics(MetricCollection):
    """A task's metrics that remember the order of its definition (``MetricCollection`` sorts its keys): the
    first is the selection metric."""

    def __init__(self, metrics: dict, order: list[str] | None = None):
        super().__init__(metrics)
        self.order = list(order or metrics)


def build_metrics(task: TaskDef) -> TaskMetrics:
    """The task's metrics, in the order listed in its definition (the first is the selection metric); SQuAD EM and
    F1 are one :class:`~mtdnn.modeling.token_metrics.SpanScores` returning the listed ones."""
    spans = [name for name in task.metric_names if name in SpanScores.KEYS]
    metrics = {name: METRICS[name](task) for name in task.metric_names if name not in SpanScores.KEYS}
    if spans:
        metrics["squad"] = SpanScores(spans, task.qa_spec.n_best, task.qa_spec.max_answer_length)
    return TaskMetrics(metrics, task.metric_names)


def attach_split(metrics: MetricCollection, split) -> MetricCollection:
    """Give metrics that score whole questions from their windows (:class:`~mtdnn.modeling.token_metrics.SpanScores`)
    the tokenized split they score; other metrics are left as they are."""
    for metric in metrics.values():
        if hasattr(metric, "attach"):
            metric.attach(split)
    return metrics


def update_metrics(metrics: MetricCollection, task_type: str, outputs: torch.Tensor, labels: torch.Tensor,
                   weight: torch.Tensor) -> None:
    """Add a batch to ``metrics``, leaving out weight-0 (padding) examples: the type's ``metric_inputs`` give
    what is compared (ids, scores in float64, or an MLM task's logits and original tokens). A batch of padding only
    (see :class:`~mtdnn.tasks.schedule.EvalBatchSampler`) adds nothing."""
    if not (weight > 0).any():
        return
    metrics.update(*TASK_TYPES[task_type].metric_inputs(outputs, labels, weight))


def compute_metrics(metrics: MetricCollection) -> dict[str, float]:
    """``{metric: value}`` as Python floats (NaN where undefined, e.g. Pearson on constant predictions), in the
    collection's order (the task's: its selection metric first)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics warns on constant inputs; the NaN is handled by the average
        values = metrics.compute()
    first = [name for name in getattr(metrics, "order", []) if name in values]
    order = first + sorted(name for name in values if name not in first)
    return {name: float(values[name]) for name in order}


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

