"""The stochastic answer network (SAN), MT-DNN's output module for pairwise text classification.

Liu, Duh and Gao 2018, "Stochastic Answer Networks for Natural Language Inference" (arXiv 1804.07888),
section 2, answer module; MT-DNN (Liu et al. 2019, arXiv 1901.11504) section 3.1, "Pairwise Text
Classification Output". With the encoder's token states as the working memories (MT-DNN: "the contextual
embeddings of P and H"), K reasoning steps:

    M^p (batch, m, d), M^h (batch, n, d)      working memories: token states of the premise and the hypothesis
    s^0 = sum_j alpha_j M^h_j,  alpha = softmax_j(w_1^T M^h_j)                 initial state (self-attention)
    beta = softmax_j(s^{k-1} W_2 M^p_j),  x^k = sum_j beta_j M^p_j             bilinear-attention read
    s^k = GRU(s^{k-1}, x^k)                                                     state update
    P^k = softmax(W_3 [s^k; x^k; |s^k - x^k|; s^k * x^k])                       prediction of step k (batch, C)
    P = mean_k P^k                                                              answer (batch, C)

for k = 1..K. In training, *stochastic prediction dropout* drops whole steps at random (each with probability
``step_dropout``, at least one kept per example) and averages the kept ones; in evaluation all K are averaged.
(MT-DNN writes the premise memory M^p, the hypothesis M^h and averages P^0..P^{K-1}; in SAN's notation these are
theta_2, theta_3, theta_4 for w_1, W_2, W_3.)

The premise and hypothesis tokens are found with the fast tokenizer's ``sequence_ids`` (0: premise, 1:
hypothesis, -1: special tokens and padding), stored in the tokenized cache, so SAN works for encoders without
token-type ids (RoBERTa, XLNet, ...).

The head returns log P, the log of the averaged probabilities, ``(batch, C)``: cross-entropy on it is
-log P_y, MT-DNN's negative log-likelihood (log_softmax of log-probabilities that sum to one is the identity),
softmax of it is P, and argmax gives the predicted class. For distillation at temperature T the temperature
divides each step's logits before averaging: log mean_k softmax(z^k / T) (:meth:`SanHead.forward` with
``temperature``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..tasks.taskdef import TaskDef

DEFAULT_STEPS = 5
DEFAULT_STEP_DROPOUT = 0.1


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of ``scores`` ``(batch, L)`` where ``mask`` ``(batch, L)`` (bool) is True.

    A row whose mask is all False (e.g. a hypothesis truncated away) gets zero weights, not NaN.
    """
    scores = scores.float().masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


def step_keep_mask(batch: int, steps: int, step_dropout: float, device: torch.device) -> torch.Tensor:
    """Stochastic prediction dropout: ``(batch, steps)`` bool, each step kept with probability 1 - ``step_dropout``,
    and in every row where none was, the step of the row's largest draw (uniform over the steps, by symmetry), so
    that at least one is kept per example. One ``rand`` draw and no data-dependent branch: no host sync."""
    draws = torch.rand(batch, steps, device=device)
    # the row's largest draw is >= step_dropout exactly when some step is kept: then it is kept already
    return (draws >= step_dropout) | (draws == draws.amax(dim=1, keepdim=True))


def average_steps(step_logits: torch.Tensor, keep: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log mean_{k kept} softmax(z^k / T): ``step_logits`` ``(batch, K, C)``, ``keep`` ``(batch, K)`` bool ->
    ``(batch, C)`` log-probabilities (computed with logsumexp, so no probability is rounded to log 0)."""
    log_p = torch.log_softmax(step_logits.float() / temperature, dim=-1)
    log_p = log_p.masked_fill(~keep.unsqueeze(-1), float("-inf"))
    return torch.logsumexp(log_p, dim=1) - keep.sum(dim=1, keepdim=True).float().log()


class SanHead(nn.Module):
    """SAN over the encoder's token states (see the module docstring for the equations).

    Args:
        task: a classification task with a text pair and ``head.type: san``; ``head.steps`` K (default 5),
            ``head.step_dropout`` (default 0.1), ``head.dropout`` on the working memories.
        hidden_size: d, the encoder's hidden size.

    Parameters: ``w_1`` (d -> 1), ``W_2`` (d x d, bilinear), the GRU cell (d -> d) and ``W_3`` (4d -> C).
    """

    def __init__(self, task: TaskDef, hidden_size: int):
        super().__init__()
        self.steps = task.head.steps or DEFAULT_STEPS
        self.step_dropout = DEFAULT_STEP_DROPOUT if task.head.step_dropout is None else task.head.step_dropout
        self.dropout = nn.Dropout(task.head.dropout)
        self.w_1 = nn.Linear(hidden_size, 1)
        self.W_2 = nn.Linear(hidden_size, hidden_size, bias=False)
        self.gru = nn.GRUCell(hidden_size, hidden_size)
        self.W_3 = nn.Linear(4 * hidden_size, task.num_outputs)
        for layer in (self.w_1, self.W_2, self.W_3):
            nn.init.normal_(layer.weight, std=0.02)
        nn.init.zeros_(self.w_1.bias)
        nn.init.zeros_(self.W_3.bias)

    def step_logits(self, hidden: torch.Tensor, attention_mask: torch.Tensor,
                    sequence_ids: torch.Tensor) -> torch.Tensor:
        """The K steps' logits z^k ``(batch, K, C)`` from ``hidden`` ``(batch, seq_len, d)`` and
        ``sequence_ids`` ``(batch, seq_len)`` (0 premise, 1 hypothesis, -1 other)."""
        memory = self.dropout(hidden)
        real = attention_mask.bool()
        premise, hypothesis = (sequence_ids == 0) & real, (sequence_ids == 1) & real
        alpha = masked_softmax(self.w_1(memory).squeeze(-1), hypothesis)               # (batch, n)
        state = torch.einsum("bl,bld->bd", alpha.to(memory.dtype), memory)            # s^0 (batch, d)
        logits = []
        for _ in range(self.steps):
            scores = torch.einsum("bd,bld->bl", self.W_2(state), memory)              # s^{k-1} W_2 M^p_j
            beta = masked_softmax(scores, premise)                                    # (batch, m)
            x = torch.einsum("bl,bld->bd", beta.to(memory.dtype), memory)             # x^k (batch, d)
            state = self.gru(x, state)                                                # s^k (batch, d)
            features = torch.cat([state, x, (state - x).abs(), state * x], dim=-1)    # (batch, 4d)
            logits.append(self.W_3(features))                                         # z^k (batch, C)
        return torch.stack(logits, dim=1)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooled: torch.Tensor | None,
                sequence_ids: torch.Tensor | None = None,
                temperature: float | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """log P ``(batch, C)``: the log of the mean probabilities over the kept steps (all steps in eval mode).

        With ``temperature`` T, returns ``(log P, log P_T)`` from the same steps and the same dropped steps,
        where log P_T = log mean_k softmax(z^k / T) is what distillation compares with the soft targets.

        Raises:
            ValueError: no ``sequence_ids`` in the batch (the task was not tokenized for SAN).
        """
        if sequence_ids is None:
            raise ValueError("the SAN head needs the batch's sequence_ids (tokenize the task with head.type: san)")
        z = self.step_logits(hidden, attention_mask, sequence_ids)
        if self.training and self.step_dropout > 0:
            keep = step_keep_mask(z.shape[0], self.steps, self.step_dropout, z.device)
        else:
            keep = torch.ones(z.shape[:2], dtype=torch.bool, device=z.device)
        log_p = average_steps(z, keep)
        if temperature is None:
            return log_p
        return log_p, average_steps(z, keep, temperature)


def san_head(task: TaskDef, encoder: nn.Module) -> SanHead:
    """:class:`SanHead` sized to the encoder's hidden size."""
    return SanHead(task, encoder.config.hidden_size)

