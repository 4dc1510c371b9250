"""Task heads: pool the shared encoder's output, apply dropout, project to the task's outputs.

Shapes: the encoder gives ``hidden`` ``(batch, seq_len, hidden_size)`` and, for encoders with a pooler (BERT),
``pooled`` ``(batch, hidden_size)`` = tanh(W h_[CLS] + b). A head returns

- classification: logits ``(batch, num_labels)``;
- regression: a score ``(batch,)``;
- ranking: one score per candidate, ``(groups, num_candidates)``, where the encoder saw
  ``groups * num_candidates`` (context, candidate) pairs (MT-DNN's ranking head, arXiv 1901.11504 eq. 3).
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..tasks.taskdef import TaskDef


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """Reduce ``hidden`` ``(batch, seq_len, hidden_size)`` to ``(batch, hidden_size)``.

    ``cls``: the first token's state; ``mean``: the mean over tokens where ``attention_mask`` is 1;
    ``pooler``: the encoder's pooled [CLS] output ``pooled``.

    Raises:
        ConfigError: ``pooler`` asked of an encoder that has no pooler.
    """
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    if pooled is None:
        raise ConfigError("head.pooling 'pooler': this encoder has no pooler output; use pooling: cls or mean")
    return pooled


class TaskHead(nn.Module):
    """Pooling -> dropout -> linear layer for one task (see the module docstring for output shapes)."""

    def __init__(self, task: TaskDef, hidden_size: int):
        super().__init__()
        self.task_type = task.type
        self.pooling = task.head.pooling
        self.num_candidates = task.num_candidates
        self.dropout = nn.Dropout(task.head.dropout)
        self.out = nn.Linear(hidden_size, task.num_outputs)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        x = self.out(self.dropout(pool(hidden, attention_mask, pooled, self.pooling)))
        if self.task_type == "classification":
            return x
        if self.task_type == "regression":
            return x.squeeze(-1)
        return x.view(-1, self.num_candidates)
