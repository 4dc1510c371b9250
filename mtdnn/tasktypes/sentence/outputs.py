"""Reading the head outputs of the sentence-level types back: what the metrics compare, the predictions.

Head outputs: logits ``(n, classes)``, scores ``(n,)``, candidate scores ``(n, k)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ...tasks.taskdef import TaskDef


def argmax(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What classification and ranking metrics compare: predicted and gold ids ``(n,)`` of weight > 0 examples."""
    keep = weight > 0
    return outputs.argmax(-1)[keep], labels[keep]


def as_scores(outputs: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What regression metrics compare: predicted and gold scores ``(n,)`` of weight > 0 examples, in float64
    (except on MPS, which has none): torchmetrics merges Pearson's running moments across DDP ranks, and in
    float32 that merge alone moves the result by ~1e-6."""
    keep = weight > 0
    preds, labels = outputs.float()[keep], labels[keep]
    if preds.device.type != "mps":
        preds, labels = preds.double(), labels.double()
    return preds, labels


def decode_classes(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """``{"prediction": label name, "probability": p, "probabilities": {label: p}}`` with p = softmax(logits)."""
    return _decode(outputs, task.labels, lambda i: task.labels[i])


def decode_candidates(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """The chosen candidate's index, with the softmax over the group keyed by candidate column."""
    return _decode(outputs, task.candidates, lambda i: i)


def _decode(outputs: torch.Tensor, names, prediction) -> list[dict]:
    assert names is not None
    probs = outputs.float().softmax(-1)
    best = probs.argmax(-1).tolist()
    return [{"prediction": prediction(i), "probability": p[i], "probabilities": dict(zip(names, p))}
            for i, p in zip(best, probs.tolist())]
