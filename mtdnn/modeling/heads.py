"""Task heads: pool the shared encoder's output, apply dropout, project to the task's outputs.

Each task type builds its heads (:meth:`mtdnn.tasks.types.TaskKind.build_head`) from the builders here
(:func:`linear_head`) and in :mod:`.san`, :mod:`.mlm` and :mod:`.token_heads`. A head is called as
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


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """Reduce ``hidden`` ``(batch, seq_len, hidden_size)`` to ``(batch, hidden_size)``.

    ``cls``: the first real token's state ([CLS], <s>; position 0 unless the batch is left-padded);
    ``last``: the last real token's state (XLNet's <cls>: the last position when left-padded); ``mean``: the
    mean over tokens where ``attention_mask`` ``(batch, seq_len)`` is 1; ``pooler``: the encoder's pooled
    [CLS] output ``pooled``. ``cls`` and ``last`` read their position from ``attention_mask``, so they hold for
    either padding side.

    Raises:
        ConfigError: ``pooler`` asked of an encoder that has no pooler.
    """
    if pooling in ("cls", "last"):
        positions = torch.arange(attention_mask.size(1), device=attention_mask.device)
        real = attention_mask > 0
        # first real token: the smallest position with mask 1; last: the largest
        index = (torch.where(real, positions, attention_mask.size(1)).amin(-1) if pooling == "cls"
                 else torch.where(real, positions, -1).amax(-1)).clamp(0, attention_mask.size(1) - 1)
        return hidden[torch.arange(hidden.size(0), device=hidden.device), index]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    if pooled is None:
        raise ConfigError("head.pooling 'pooler': this encoder has no pooler output; use pooling: cls or mean")
    return pooled


# Families pre-trained with a sentence-level objective on the pooled [CLS] (BERT: next-sentence prediction;
# ALBERT: sentence-order prediction), so their pooler is trained; RoBERTa's pooler exists but was never trained.
PRETRAINED_POOLER = ("bert", "albert")
# Families whose summary token is the last one (XLNet appends <cls>; Yang et al. 2019, arXiv 1906.08237).
SUMMARY_LAST = ("xlnet",)


def has_pooler(encoder: nn.Module) -> bool:
    """Whether the encoder returns a ``pooler_output`` (BERT, ALBERT, RoBERTa built with their pooler)."""
    return getattr(encoder, "pooler", None) is not None


def default_pooling(encoder: nn.Module) -> str:
    """The pooling of a task that sets no ``head.pooling``, for ``encoder`` (a Hugging Face ``AutoModel``).

    ``pooler`` for BERT and ALBERT (a pooler trained in pre-training), ``last`` for XLNet (its summary token
    <cls> is last), ``cls`` for every other family (RoBERTa, DistilBERT, ELECTRA, DeBERTa, ModernBERT, ...).
    """
    model_type = getattr(encoder.config, "model_type", "")
    if model_type in SUMMARY_LAST:
        return "last"
    if model_type in PRETRAINED_POOLER and has_pooler(encoder):
        return "pooler"
    return "cls"


def resolve_pooling(tasks: dict[str, TaskDef], encoder: nn.Module) -> dict[str, TaskDef]:
    """``tasks`` with every unset ``head.pooling`` replaced by :func:`default_pooling` of ``encoder`` (tasks of a type
    whose head pools, ``TaskKind.pools``; the others keep theirs, unset).

    Raises:
        ConfigError: a task asks for ``pooler`` and the encoder has none (naming the task and encoder).
    """
    chosen = default_pooling(encoder)
    resolved = {}
    for name, task in tasks.items():
        if not task.kind.pools:  # token-level and MLM heads read every piece: no pooling to choose
            resolved[name] = task
            continue
        if task.head.pooling == "pooler" and not has_pooler(encoder):
            raise ConfigError(f"task '{name}', field 'head.pooling': 'pooler' but the encoder "
                              f"({type(encoder).__name__}) has no pooler; use {' or '.join(dict.fromkeys([chosen, 'cls', 'mean']))}"
                              f", or leave head.pooling unset (this encoder then gets {chosen})")
        if task.head.pooling is None:
            task = task.model_copy(update={"head": task.head.model_copy(update={"pooling": chosen})})
        resolved[name] = task
    return resolved


class TaskHead(nn.Module):
    """Pooling -> dropout -> linear layer for one task (see the module docstring for output shapes); the type's
    ``head_outputs`` (:class:`~mtdnn.tasks.types.TaskKind`) shapes the result. ``task.head.pooling`` must be set (see
    :func:`resolve_pooling`)."""

    def __init__(self, task: TaskDef, hidden_size: int):
        super().__init__()
        if task.head.pooling is None:
            raise ValueError(f"task '{task.name}': head.pooling is not resolved (use resolve_pooling)")
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
        out = self.task.kind.head_outputs(self.task, x)
        return out if temperature is None else (out, out.float() / temperature)


def linear_head(task: TaskDef, encoder: nn.Module) -> TaskHead:
    """:class:`TaskHead` sized to the encoder's hidden size."""
    return TaskHead(task, encoder.config.hidden_size)
