"""Multi-task schedules: which task each optimizer step trains on, and which examples form its batch.

MT-DNN trains on single-task mini-batches: at each step one task is chosen and one batch of that task is
used (Liu et al. 2019, arXiv 1901.11504, Algorithm 1). The schedule is a batch sampler over one DataLoader,
so every step is exactly one task's batch. Its order is a pure function of ``(seed, epoch)``, so every DDP rank
computes the same plan and takes the same task at every step, each with its own shard of the global batch.

Schedules (``schedule=``):

- ``proportional`` (default, Algorithm 1): each task's mini-batches once per epoch, merged and shuffled; a
  task's share of steps is proportional to its size.
- ``temperature``: at each step task t is drawn with p_t proportional to n_t^(1/T) (n_t its training examples
  times its ``sampling_weight``); T = 1 is proportional sampling, larger T flattens towards uniform (as in
  multilingual BERT/XLM-R's exponentiated sampling). The epoch has Algorithm 1's number of steps.
- ``uniform``: every task equally likely at each step (the T -> infinity limit).

Within a task, batches are length-grouped: a seeded permutation is cut into chunks of ``50 * batch_size``
examples, each chunk is sorted by length and cut into batches, so that padding is small but order stays random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import torch

ScheduleName = Literal["proportional", "temperature", "uniform"]
# (task index, row, weight, global size): weight 0 marks a DDP padding copy; global size is the number of real
# examples of the optimizer step on all ranks and accumulated batches together (the same on every rank, so the
# loss needs no all-reduce).
Key = tuple[int, int, float, int]

MEGA_BATCH_FACTOR = 50


def _generator(*parts: int) -> torch.Generator:
    seed = 0
    for p in parts:
        seed = (seed * 1_000_003 + int(p)) % (2**63 - 1)
    return torch.Generator().manual_seed(seed)


def length_grouped_batches(lengths: Sequence[int], batch_size: int, generator: torch.Generator,
                           group_by_length: bool = True) -> list[list[int]]:
    """Split a random permutation of ``range(len(lengths))`` into batches of ``batch_size`` rows.

    With ``group_by_length``, the permutation is cut into chunks of ``50 * batch_size`` rows and each chunk
    sorted by decreasing length before cutting it into batches (the last batch of a task may be short).
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if group_by_length:
        chunk = batch_size * MEGA_BATCH_FACTOR
        order = [i for s in range(0, len(order), chunk)
                 for i in sorted(order[s:s + chunk], key=lambda j: -lengths[j])]
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]


@dataclass
class TaskSize:
    """What the schedule needs to know about one task's training split."""

    lengths: Sequence[int]
    sampling_weight: float = 1.0


class MultiTaskBatchSampler(torch.utils.data.Sampler):
    """Yields, per batch, one task's batch as a list of keys ``(task_index, row, weight, global_size)``.

    ``batch_size`` is the global batch: with ``world_size`` ranks, rank r takes rows ``r, r + W, ...`` of each
    global batch, padded with weight-0 copies so that every rank has ``ceil(len / W)`` rows (the copies are
    masked out of loss and metrics). An optimizer step is ``accumulate_grad_batches`` consecutive batches of the
    plan (the last step of an epoch may have fewer); ``global_size`` is the number of real examples of the
    step the batch belongs to, over all its batches and ranks: the loss normaliser. Call :meth:`set_epoch` at the start of every epoch: the plan of epoch e
    depends only on ``(seed, e)``. ``state_dict`` holds the epoch and the number of steps already taken.

    Raises:
        ValueError: an unknown schedule, a non-positive batch size or temperature, or no tasks.
    """

    def __init__(self, tasks: Sequence[TaskSize], batch_size: int, schedule: ScheduleName = "proportional",
                 temperature: float = 1.0, seed: int = 0, rank: int = 0, world_size: int = 1,
                 group_by_length: bool = True, accumulate_grad_batches: int = 1):
        if schedule not in ("proportional", "temperature", "uniform"):
            raise ValueError(f"unknown schedule {schedule!r} (use proportional, temperature or uniform)")
        if batch_size <= 0 or temperature <= 0 or not tasks:
            raise ValueError("batch_size and temperature must be positive and at least one task given")
        self.tasks, self.batch_size, self.schedule = list(tasks), batch_size, schedule
        self.temperature, self.seed, self.group_by_length = temperature, seed, group_by_length
        self.rank, self.world_size = rank, world_size
        self.accumulate_grad_batches = accumulate_grad_batches
        self.epoch, self.position = 0, 0

    # -- plan ---------------------------------------------------------------------------------------------

    def _task_batches(self, t: int, epoch: int, repeat: int = 0) -> list[list[int]]:
        return length_grouped_batches(self.tasks[t].lengths, self.batch_size, _generator(self.seed, epoch, t, repeat),
                                      self.group_by_length)

    def batches_per_task(self) -> list[int]:
        """Algorithm 1's batch count per task for one epoch (scaled by ``sampling_weight``)."""
        return [max(1, round(math.ceil(len(t.lengths) / self.batch_size) * t.sampling_weight)) for t in self.tasks]

    def task_probabilities(self) -> list[float]:
        """p_t for the sampling schedules: proportional to (sampling_weight * n_t)^(1/T); uniform: 1/K.

        Computed in log space, p_t = softmax_t(log(w_t n_t) / T), so that no power overflows: a tiny T gives
        the largest task (almost) every step, its limit, instead of an OverflowError.
        """
        if self.schedule == "uniform":
            return [1.0 / len(self.tasks)] * len(self.tasks)
        logs = [math.log(m) / self.temperature if (m := len(t.lengths) * t.sampling_weight) > 0 else -math.inf
                for t in self.tasks]
        top = max(logs)
        sizes = [math.exp(v - top) for v in logs]
        return [s / sum(sizes) for s in sizes]

    def _stream(self, t: int, epoch: int) -> Iterator[list[int]]:
        repeat = 0
        while True:
            yield from self._task_batches(t, epoch, repeat)
            repeat += 1

    def plan(self, epoch: int) -> list[tuple[int, list[int]]]:
        """The global plan of one epoch: ``[(task_index, rows), ...]``, one entry per optimizer step."""
        counts = self.batches_per_task()
        streams = [self._stream(t, epoch) for t in range(len(self.tasks))]
        if self.schedule == "proportional":
            steps = [t for t, c in enumerate(counts) for _ in range(c)]
            order = torch.randperm(len(steps), generator=_generator(self.seed, epoch, 1_000_000)).tolist()
            tasks = [steps[i] for i in order]
        else:
            probs = torch.tensor(self.task_probabilities(), dtype=torch.float64)
            draws = torch.multinomial(probs, sum(counts), replacement=True,
                                      generator=_generator(self.seed, epoch, 2_000_000))
            tasks = draws.tolist()
        return [(t, next(streams[t])) for t in tasks]

    def shard(self, rows: list[int]) -> list[tuple[int, float]]:
        """This rank's rows of a global batch, padded with weight-0 copies to ``ceil(len(rows) / W)``."""
        mine = [(r, 1.0) for r in rows[self.rank::self.world_size]]
        size = -(-len(rows) // self.world_size)
        return mine + [(rows[0], 0.0)] * (size - len(mine))

    # -- sampler protocol -----------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose plan the next iteration yields (restarting it unless already in it)."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def __len__(self) -> int:
        return sum(self.batches_per_task())

    def step_examples(self, plan: list[tuple[int, list[int]]]) -> list[int]:
        """Per batch of ``plan``, the real examples of its optimizer step (its group of accumulated batches)."""
        k = self.accumulate_grad_batches
        totals = [sum(len(rows) for _, rows in plan[s:s + k]) for s in range(0, len(plan), k)]
        return [totals[i // k] for i in range(len(plan))]

    def __iter__(self) -> Iterator[list[Key]]:
        plan = self.plan(self.epoch)
        examples = self.step_examples(plan)
        start = self.position if self.position < len(plan) else 0
        for step in range(start, len(plan)):
            task, rows = plan[step]
            self.position = step + 1
            yield [(task, r, w, examples[step]) for r, w in self.shard(rows)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


class EvalBatchSampler(torch.utils.data.Sampler):
    """Batches of one split for evaluation, longest first, sharded across ranks without repeats.

    The batches are those of one process (the length-sorted order cut every ``batch_size`` rows); rank r takes
    batches ``r, r + W, ...``. No example is evaluated twice, and every batch has the same rows and padded
    length whatever the number of ranks, so predictions are identical to one process's.

    Every rank gets the same number of batches, ``ceil(batches / W)``, so that each reaches every collective of
    the evaluation (DDP's forward, the metrics' gather) even with more ranks than batches: a rank short of
    batches gets padding batches of one key ``(row, 0.0)``, the shortest row with weight 0, which
    :class:`~mtdnn.tasks.tokenized.TokenizedSplit` marks as padding and the metrics leave out.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, rank: int = 0, world_size: int = 1):
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        batches = [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
        self.batches: list[list] = batches[rank::world_size]
        self.padding = -(-len(batches) // world_size) - len(self.batches) if order else 0
        self.batches += [[(order[-1], 0.0)] for _ in range(self.padding)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)
