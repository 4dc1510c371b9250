"""The LightningDataModule of multi-task training: tokenized splits, the task schedule, collation, loaders.

Each training batch is one task's batch (see :mod:`mtdnn.tasks.schedule`); each task has its own validation loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from ..tasks.batch import Batch
from ..tasks.collate import collate, pad_left
from ..tasks.schedule import EvalBatchSampler, MultiTaskBatchSampler, TaskSize
from ..tasks.taskdef import TaskDef
from ..tasks.tokenized import TokenizedSplit, tokenized_split
from .speed import mark_shapes


class MultiTaskTrainSet(torch.utils.data.Dataset):
    """Indexes several tasks' training splits by the schedule's keys ``(task_index, row, weight, global_size)``.

    ``global_size`` (the step's real examples on all ranks together) is optional: 3-tuples are accepted.
    Items carry the schedule's current ``epoch`` when a ``sampler`` is given (dynamic MLM masks change with it).
    """

    def __init__(self, splits: list[TokenizedSplit], sampler: MultiTaskBatchSampler | None = None):
        self.splits, self.sampler = splits, sampler

    def __len__(self) -> int:
        return sum(len(s) for s in self.splits)

    def __getitem__(self, key: tuple) -> dict[str, Any]:
        task, row, weight = key[:3]
        item = self.splits[task][row]
        item["task_index"], item["weight"] = task, weight
        if len(key) > 3:
            item["global_examples"] = key[3]
        if self.sampler is not None:
            item["epoch"] = self.sampler.epoch
        return item


class TaskCollator:
    """``collate_fn`` for batches that hold one task each (the task is read from the items or fixed).

    Besides :func:`~mtdnn.tasks.collate.collate`'s tensors the batch holds two Python ints counted on the host,
    so that the training step needs no host-device synchronisation: ``examples`` (this rank's real rows) and,
    for scheduled training batches, ``global_examples`` (the step's real rows on all ranks, from the schedule).

    With ``length_buckets`` (ascending lengths), each batch is padded to the shortest bucket that holds its
    longest sequence: a compiled encoder then sees a bounded set of sequence lengths (see :func:`bucket_length`).
    A tokenizer that pads on the left (XLNet) gets its batches padded on the left (:func:`~mtdnn.tasks.collate.pad_left`).
    """

    def __init__(self, tasks: list[TaskDef], pad_token_id: int, pad_to_multiple_of: int = 1,
                 length_buckets: list[int] | None = None, tokenizer=None):
        self.tasks, self.pad_token_id, self.pad_to_multiple_of = tasks, pad_token_id, pad_to_multiple_of
        self.length_buckets = length_buckets
        self.tokenizer = tokenizer  # for types that change tokens when collating (mlm)

    def __call__(self, features: list[dict[str, Any]]) -> Batch:
        task = self.tasks[features[0].get("task_index", 0)]
        batch = collate(features, task, self.pad_token_id, self.pad_to_multiple_of, self.tokenizer)
        if self.length_buckets:
            batch = pad_to_bucket(batch, self.length_buckets, self.pad_token_id)
        if getattr(self.tokenizer, "padding_side", "right") == "left":  # XLNet: padding before the tokens
            batch = pad_left(batch)
        batch.examples = sum(1 for f in features if f.get("weight", 1.0) > 0)
        if "global_examples" in features[0]:
            batch.global_examples = int(features[0]["global_examples"])
        return batch


def bucket_length(length: int, buckets: list[int]) -> int:
    """The shortest of the ascending ``buckets`` that is at least ``length`` (``length`` itself if none is)."""
    for bucket in buckets:
        if bucket >= length:
            return bucket
    return length


def pad_to_bucket(batch: Batch, buckets: list[int], pad_token_id: int) -> Batch:
    """Pad ``input_ids``, ``attention_mask`` and ``token_type_ids`` ``(rows, seq_len)`` on the right to
    :func:`bucket_length` ``(seq_len)`` (pad token, mask 0, segment 0), and the token-aligned ``(rows, seq_len)``
    entries of ``head_inputs`` (False, or -1: "no text token", as SAN's ``sequence_ids``) and ``labels`` (-100: not
    predicted, as an MLM task's); other entries are kept."""
    seq_len = batch.input_ids.shape[1]
    extra = bucket_length(seq_len, buckets) - seq_len
    if extra <= 0:
        return batch
    pad = torch.nn.functional.pad
    batch.input_ids = pad(batch.input_ids, (0, extra), value=pad_token_id)
    batch.attention_mask = pad(batch.attention_mask, (0, extra), value=0)
    if batch.token_type_ids is not None:
        batch.token_type_ids = pad(batch.token_type_ids, (0, extra), value=0)
    head_inputs = batch.head_kwargs
    for name, value in head_inputs.items():
        if value.dim() == 2 and value.shape[1] == seq_len:
            head_inputs[name] = pad(value, (0, extra), value=False if value.dtype == torch.bool else -1)
    labels = batch.labels
    if labels is not None and labels.dim() == 2 and labels.shape[1] == seq_len:
        batch.labels = pad(labels, (0, extra), value=-100)
    return batch


class ScheduledDataLoader(DataLoader):
    """The training DataLoader, stateful so that Lightning can resume it mid-epoch.

    Lightning restores a loader's position only when the loader has ``state_dict``/``load_state_dict``;
    otherwise it silently replays the epoch from its start. The state is the schedule's epoch and the number
    of batches Lightning has processed in it (``progress()``), not the sampler's own position, which runs
    ahead by the batches the fetcher has prefetched.
    """

    def __init__(self, *args, progress=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.progress = progress

    def state_dict(self) -> dict:
        position = self.progress() if self.progress is not None else self.batch_sampler.position
        return {"epoch": self.batch_sampler.epoch, "position": int(position)}

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.load_state_dict(state)


class MultiTaskDataModule(pl.LightningDataModule):
    """Tokenized, cached splits of several tasks; one scheduled train loader, one dev loader per task.

    Args:
        tasks: task definitions, in order (the order of the dev loaders).
        data_dir: the data root.
        tokenizer: the encoder's fast tokenizer.
        batch_size: the global train batch (split across DDP ranks).
        eval_batch_size: per-rank dev batch.
        schedule, temperature, seed, group_by_length: see :class:`~mtdnn.tasks.schedule.MultiTaskBatchSampler`.
        limit_train_examples: keep the first N rows of each task's train split (None: all).
        limit_eval_examples: keep the first N rows of each task's dev split (None: all).
        max_length: overrides every task's ``max_length`` when given.
        pad_to_multiple_of: pad sequence length to a multiple (8 suits tensor cores).
        length_buckets: pad each batch to the shortest of these ascending lengths that holds it (a bounded set
            of shapes for a compiled encoder); None: no buckets.
        accumulate_grad_batches: batches per optimizer step; every training batch carries ``global_examples``,
            the real examples of its optimizer step (the loss normaliser, see :meth:`MultiTaskModule.loss_normalizer`).
    """

    def __init__(self, tasks: dict[str, TaskDef], data_dir: Path, tokenizer, batch_size: int = 32,
                 eval_batch_size: int = 64, schedule: str = "proportional", temperature: float = 1.0,
                 seed: int = 0, limit_train_examples: int | None = None, max_length: int | None = None,
                 pad_to_multiple_of: int = 1, num_workers: int = 0, length_buckets: list[int] | None = None,
                 limit_eval_examples: int | None = None, accumulate_grad_batches: int = 1,
                 group_by_length: bool = True):
        super().__init__()
        self.group_by_length = group_by_length
        self.limit_eval_examples = limit_eval_examples
        self.tasks, self.data_dir, self.tokenizer = tasks, data_dir, tokenizer
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.schedule, self.temperature, self.seed = schedule, temperature, seed
        self.limit_train_examples, self.max_length = limit_train_examples, max_length
        self.pad_to_multiple_of, self.num_workers = pad_to_multiple_of, num_workers
        self.length_buckets = sorted(length_buckets) if length_buckets else None
        self.mark_shapes: str | None = None  # "buckets" or "dynamic" for a compiled encoder (mtdnn.training.speed)
        self.accumulate_grad_batches = accumulate_grad_batches
        self.train_sets: list[TokenizedSplit] = []
        self.dev_sets: dict[str, TokenizedSplit] = {}
        self.train_sampler: MultiTaskBatchSampler | None = None
        # Every rank gets the same number of dev batches per task (EvalBatchSampler pads with weight-0 batches),
        # so none skips the evaluation's collectives; an empty loader is still allowed, as Lightning's check asks.
        self.allow_zero_length_dataloader_with_multiple_devices = True

    @property
    def dev_tasks(self) -> list[str]:
        """Tasks with a dev split, in order: these are scored each epoch."""
        return [name for name, t in self.tasks.items() if "dev" in t.splits]

    def _split(self, task: TaskDef, split: str) -> TokenizedSplit:
        return tokenized_split(task, split, self.data_dir, self.tokenizer, self.max_length)

    def prepare_data(self) -> None:
        """Parse, validate and tokenize every split once (rank 0); later calls read the cache."""
        for task in self.tasks.values():
            self._split(task, "train")
            if "dev" in task.splits:
                self._split(task, "dev")

    def setup(self, stage: str | None = None) -> None:
        self.train_sets = []
        for task in self.tasks.values():
            split = self._split(task, "train")
            if self.limit_train_examples:
                split = split.head(self.limit_train_examples)
            self.train_sets.append(split)
        self.dev_sets = {name: self._split(self.tasks[name], "dev") for name in self.dev_tasks}
        if self.limit_eval_examples:
            self.dev_sets = {name: split.head(self.limit_eval_examples) for name, split in self.dev_sets.items()}
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        sizes = [TaskSize(s.lengths, t.sampling_weight) for s, t in zip(self.train_sets, self.tasks.values())]
        self.train_sampler = MultiTaskBatchSampler(sizes, self.batch_size, self.schedule, self.temperature,
                                                   self.seed, rank, world, group_by_length=self.group_by_length,
                                                   accumulate_grad_batches=self.accumulate_grad_batches)
        self._rank, self._world = rank, world

    def _collator(self, tasks: list[TaskDef]) -> TaskCollator:
        return TaskCollator(tasks, self.tokenizer.pad_token_id or 0, self.pad_to_multiple_of, self.length_buckets,
                            self.tokenizer)

    def _processed_batches(self) -> int:
        return self.trainer.fit_loop.epoch_loop.batch_progress.current.processed

    def train_dataloader(self) -> DataLoader:
        # A generator of its own keeps DataLoader.__iter__ from drawing on the global RNG (exact resume).
        return ScheduledDataLoader(MultiTaskTrainSet(self.train_sets, self.train_sampler), batch_sampler=self.train_sampler,
                                   collate_fn=self._collator(list(self.tasks.values())),
                                   num_workers=self.num_workers, generator=torch.Generator().manual_seed(self.seed),
                                   progress=self._processed_batches if self.trainer else None)

    def on_after_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        if self.mark_shapes:
            return mark_shapes(batch, self.mark_shapes)
        return batch

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(self.dev_sets[name],
                           batch_sampler=EvalBatchSampler(self.dev_sets[name].lengths, self.eval_batch_size,
                                                          self._rank, self._world),
                           collate_fn=self._collator([self.tasks[name]]), num_workers=self.num_workers,
                           generator=torch.Generator().manual_seed(self.seed))
                for name in self.dev_tasks]
