"""Task heads: pool the shared encoder's output, apply dropout, project to the task's outputs.

:data:`HEADS` maps each ``head.type`` a task type allows (:data:`mtdnn.tasks.types.TASK_TYPES`) to the
function that builds it from the task and the encoder. A head is called as
``head(hidden, attention_mask, pooled, **head_inputs)``, where ``head_inputs`` are the extra tensors the task
type's collation puts in a batch (e.g. SAN's ``sequence_ids``).

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
from .mlm import mlm_head
from .san import san_head
from .token_heads import span_head, token_head


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
    """Pooling -> dropout -> linear layer for one task (see the module docstring for output shapes); the type's
    :attr:`~mtdnn.tasks.types.TaskType.head_outputs` shapes the result."""

    def __init__(self, task: TaskDef, hidden_size: int):
        super().__init__()
        self.task = task
        self.pooling = task.head.pooling
        self.dropout = nn.Dropout(task.head.dropout)
        self.out = nn.Linear(hidden_size, task.num_outputs)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None,
                temperature: float | None = None,
                **head_inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The task's outputs; with ``temperature`` T, ``(outputs, outputs / T)`` (what distillation compares
        with the soft targets, see :class:`mtdnn.modeling.san.SanHead` for a head where it differs)."""
        x = self.out(self.dropout(pool(hidden, attention_mask, pooled, self.pooling)))
        out = self.task.task_type.head_outputs(self.task, x)
        return out if temperature is None else (out, out.float() / temperature)


def linear_head(task: TaskDef, encoder: nn.Module) -> TaskHead:
    """:class:`TaskHead` sized to the encoder's hidden size."""
    return TaskHead(task, encoder.config.hidden_size)


HEADS = {"linear": linear_head, "san": san_head, "mlm": mlm_head, "token": token_head, "span": span_head}
