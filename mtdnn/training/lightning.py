"""Lightning glue: the DataModule (data and schedule) and the LightningModule (forward, losses, metrics, optimizer).

Research code only: devices, precision, DDP, checkpoints and loggers belong to the Trainer built by
:mod:`mtdnn.train`. Each training batch is one task's batch (see :mod:`mtdnn.tasks.schedule`); each task has its own
validation loader and torchmetrics collection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from ..tasks.data import TokenizedSplit, collate, pad_left, tokenized_split
from ..modeling.losses import LOSSES
from ..modeling.metrics import attach_split, average_score, build_metrics, compute_metrics, update_metrics
from ..modeling.model import MultiTaskModel, load_encoder
from ..tasks.schedule import EvalBatchSampler, MultiTaskBatchSampler, TaskSize
from ..tasks.taskdef import TaskDef

# ------------------------------------------------------------------------------------------------------ data


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

    Besides :func:`~mtdnn.tasks.data.collate`'s tensors the batch holds two Python ints counted on the host,
    so that the training step needs no host-device synchronisation: ``examples`` (this rank's real rows) and,
    for scheduled training batches, ``global_examples`` (the step's real rows on all ranks, from the schedule).

    With ``length_buckets`` (ascending lengths), each batch is padded to the shortest bucket that holds its
    longest sequence: a compiled encoder then sees a bounded set of sequence lengths (see :func:`bucket_length`).
    A tokenizer that pads on the left (XLNet) gets its batches padded on the left (:func:`~mtdnn.tasks.data.pad_left`).
    """

    def __init__(self, tasks: list[TaskDef], pad_token_id: int, pad_to_multiple_of: int = 1,
                 length_buckets: list[int] | None = None, tokenizer=None):
        self.tasks, self.pad_token_id, self.pad_to_multiple_of = tasks, pad_token_id, pad_to_multiple_of
        self.length_buckets = length_buckets
        self.tokenizer = tokenizer  # for types that change tokens when collating (mlm)

    def __call__(self, features: list[dict[str, Any]]) -> dict:
        task = self.tasks[features[0].get("task_index", 0)]
        batch = collate(features, task, self.pad_token_id, self.pad_to_multiple_of, self.tokenizer)
        if self.length_buckets:
            batch = pad_to_bucket(batch, self.length_buckets, self.pad_token_id)
        if getattr(self.tokenizer, "padding_side", "right") == "left":  # XLNet: padding before the tokens
            batch = pad_left(batch)
        batch["examples"] = sum(1 for f in features if f.get("weight", 1.0) > 0)
        if "global_examples" in features[0]:
            batch["global_examples"] = int(features[0]["global_examples"])
        return batch


def bucket_length(length: int, buckets: list[int]) -> int:
    """The shortest of the ascending ``buckets`` that is at least ``length`` (``length`` itself if none is)."""
    for bucket in buckets:
        if bucket >= length:
            return bucket
    return length


def pad_to_bucket(batch: dict, buckets: list[int], pad_token_id: int) -> dict:
    """Pad ``input_ids``, ``attention_mask`` and ``token_type_ids`` ``(rows, seq_len)`` on the right to
    :func:`bucket_length` ``(seq_len)`` (pad token, mask 0, segment 0), and the token-aligned ``(rows, seq_len)``
    entries of ``head_inputs`` (False, or -1: "no text token", as SAN's ``sequence_ids``) and ``labels`` (-100: not
    predicted, as an MLM task's); other entries are kept."""
    seq_len = batch["input_ids"].shape[1]
    extra = bucket_length(seq_len, buckets) - seq_len
    if extra <= 0:
        return batch
    pad = torch.nn.functional.pad
    batch["input_ids"] = pad(batch["input_ids"], (0, extra), value=pad_token_id)
    batch["attention_mask"] = pad(batch["attention_mask"], (0, extra), value=0)
    if "token_type_ids" in batch:
        batch["token_type_ids"] = pad(batch["token_type_ids"], (0, extra), value=0)
    head_inputs = batch.get("head_inputs", {})
    for name, value in head_inputs.items():
        if value.dim() == 2 and value.shape[1] == seq_len:
            head_inputs[name] = pad(value, (0, extra), value=False if value.dtype == torch.bool else -1)
    labels = batch.get("labels")
    if labels is not None and labels.dim() == 2 and labels.shape[1] == seq_len:
        batch["labels"] = pad(labels, (0, extra), value=-100)
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
            from .speed import mark_shapes

            return mark_shapes(batch, self.mark_shapes)
        return batch

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(self.dev_sets[name],
                           batch_sampler=EvalBatchSampler(self.dev_sets[name].lengths, self.eval_batch_size,
                                                          self._rank, self._world),
                           collate_fn=self._collator([self.tasks[name]]), num_workers=self.num_workers,
                           generator=torch.Generator().manual_seed(self.seed))
                for name in self.dev_tasks]


# ------------------------------------------------------------------------------------------------------ model


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient norm was seen during training (see :meth:`MultiTaskModule.check_finite`)."""


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on weight matrices, none on biases and LayerNorm weights (as BERT does)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class MultiTaskModule(pl.LightningModule):
    """Multi-task training of a shared encoder: one task's batch per step, per-task dev metrics per epoch.

    Hyper-parameters are plain Python values (checkpoints load with ``torch.load(weights_only=True)``).

    Args:
        encoder: Hugging Face name or path (``packaged-minilm`` for the embedded MiniLM).
        tasks: ``{name: TaskDef.to_plain()}``.
        dev_tasks: tasks scored on dev each epoch (default: those with a dev split).
        lr: peak learning rate of AdamW; warm-up is linear over ``warmup_ratio`` of all steps, then linear decay.
        weight_decay: AdamW weight decay (not on biases and LayerNorm weights).
        dropout: when given, overrides every dropout probability (encoder and heads); 0 makes training
            deterministic across DDP layouts.
        trust_remote_code: passed to ``from_pretrained`` (off by default).
    """

    def __init__(self, encoder: str, tasks: dict[str, dict], dev_tasks: list[str] | None = None, lr: float = 5e-5,
                 weight_decay: float = 0.01, warmup_ratio: float = 0.1, dropout: float | None = None,
                 trust_remote_code: bool = False):
        super().__init__()
        self.save_hyperparameters()
        self.task_defs = {name: TaskDef(**spec) for name, spec in tasks.items()}
        self.model = MultiTaskModel(load_encoder(encoder, trust_remote_code), self.task_defs)
        if dropout is not None:
            set_dropout(self.model, dropout)
        self.dev_task_names = dev_tasks if dev_tasks is not None else [
            n for n, t in self.task_defs.items() if "dev" in t.splits]
        self.dev_metrics = torch.nn.ModuleDict({n: build_metrics(self.task_defs[n]) for n in self.dev_task_names})
        self.dev_history: list[dict] = []   # one entry per completed epoch: {"epoch", "tasks", "average"}
        self.step_log: list[tuple[int, str]] = []  # (epoch, task) of every optimizer step, for schedule.json

    def forward(self, batch: dict) -> torch.Tensor:
        return self.model(batch["task"], batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"),
                          batch.get("head_inputs"))

    def on_train_epoch_start(self) -> None:
        sampler = getattr(self.trainer.datamodule, "train_sampler", None)
        if sampler is not None:
            sampler.set_epoch(self.current_epoch)

    def loss_normalizer(self, batch: dict) -> float | torch.Tensor:
        """The normaliser of :mod:`mtdnn.modeling.losses` for ``batch``: the real examples of its optimizer step.

        An optimizer step is ``accumulate_grad_batches`` batches (each one task's) on each of W ranks; its loss is
        ``sum_i w_i l_i / N`` over all of them, N the step's real examples. Scheduled batches carry N
        (``global_examples``, from the schedule, the same on every rank), so no all-reduce and no host-device
        synchronisation is needed. Each rank divides by N / W because DDP averages gradients over ranks, and by
        the accumulation K once more because Lightning divides every batch's loss by K: the normaliser is
        N / (W K). Other batches (a bare module, hand-made batches) fall back to this rank's ``weight.sum()``
        on one process.
        """
        world = self.trainer.world_size if self._trainer else 1
        accumulation = self.trainer.accumulate_grad_batches if self._trainer else 1
        if "global_examples" in batch:
            return max(int(batch["global_examples"]), 1) / (world * accumulation)
        if world > 1:
            raise RuntimeError("a training batch without global_examples under DDP (use MultiTaskDataModule)")
        return batch["weight"].sum().clamp(min=1.0)

    def task_loss(self, batch: dict, outputs: torch.Tensor) -> torch.Tensor:
        """The task's loss, normalised by the real examples of the optimizer step (:meth:`normalizer`)."""
        task = self.task_defs[batch["task"]]
        return task.loss_weight * LOSSES[task.loss_name](outputs, batch["labels"], batch["weight"],
                                                         self.loss_normalizer(batch))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        """One task's batch: forward, loss, logging. No host-device synchronisation happens here: the logged
        batch size is counted on the host by the collator, and a non-finite loss only sets a device-side flag
        (read at logging intervals and before checkpoints, see :meth:`check_finite`)."""
        loss = self.task_loss(batch, self(batch))
        self.flag_nonfinite(loss)
        size = batch.get("examples", len(batch["weight"]))
        self.log("train/loss", loss, on_step=True, on_epoch=True, batch_size=size)
        self.log(f"train/{batch['task']}_loss", loss, on_step=False, on_epoch=True, batch_size=size)
        self.step_log.append((self.current_epoch, batch["task"]))
        return loss

    # -- non-finite detection: a flag on the device, read by the host only at logging and checkpoint time -------

    def flag_nonfinite(self, value: torch.Tensor) -> None:
        """OR ``not isfinite(value)`` (a scalar tensor) into the device-side flag, without synchronising."""
        bad = ~torch.isfinite(value.detach())
        if getattr(self, "_nonfinite", None) is None or self._nonfinite.device != bad.device:
            self._nonfinite = torch.zeros((), dtype=torch.bool, device=bad.device)
        self._nonfinite.logical_or_(bad)

    def check_finite(self, when: str) -> None:
        """Read the flag (one synchronisation) and stop training if a loss or gradient norm was non-finite.

        Raises:
            TrainingDiverged: the flag is set; ``when`` says at which point it was read.
        """
        flag = getattr(self, "_nonfinite", None)
        if flag is not None and bool(flag):
            step = self.trainer.global_step if self._trainer else None
            raise TrainingDiverged(f"training diverged: a non-finite loss or gradient norm was seen at or before "
                                   f"optimizer step {step} (read {when}); lower --lr, keep --gradient-clip on, or "
                                   f"use a wider --precision")

    def on_train_batch_end(self, outputs, batch: dict, batch_idx: int) -> None:
        if self.trainer.global_step % max(1, self.trainer.log_every_n_steps) == 0:
            self.check_finite("at a logging interval")

    def on_train_end(self) -> None:
        self.check_finite("at the end of training")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the gradient norm with ``torch.nn.utils.clip_grad_norm_`` and flag a non-finite norm.

        Called by Lightning after backward (and, under ``16-mixed``, after the gradient scaler has unscaled the
        gradients, which is why that precision keeps a non-fused optimizer). Calling ``clip_grad_norm_``
        directly, rather than Lightning's ``clip_gradients``, lets a fused AdamW be clipped under ``bf16-mixed``
        (Lightning's mixed-precision plugin refuses any fused optimizer). The total norm, which clipping
        computes anyway, feeds the non-finite flag; with a gradient scaler, non-finite gradients are expected
        (the scaler skips that step and lowers its scale), so only the loss is flagged there.
        """
        if gradient_clip_algorithm not in (None, "norm"):
            return self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return None
        if gradient_clip_val:
            norm = torch.nn.utils.clip_grad_norm_(params, float(gradient_clip_val), foreach=True)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
        if getattr(self.trainer.precision_plugin, "scaler", None) is None:
            self.flag_nonfinite(norm)
        return None

    def on_validation_epoch_start(self) -> None:
        # Metrics that decode whole questions from their windows (span extraction) read the dev split's offsets.
        dev_sets = getattr(getattr(self.trainer, "datamodule", None), "dev_sets", {})
        for name in self.dev_task_names:
            if name in dev_sets:
                attach_split(self.dev_metrics[name], dev_sets[name])

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        task = self.task_defs[batch["task"]]
        update_metrics(self.dev_metrics[task.name], task.type, self(batch), batch["labels"], batch["weight"])

    def on_validation_epoch_end(self) -> None:
        scores = {name: compute_metrics(self.dev_metrics[name]) for name in self.dev_task_names}
        for metrics in self.dev_metrics.values():
            metrics.reset()
        if self.trainer.sanity_checking or not scores:
            return  # nothing is recorded during Lightning's sanity check
        # Tasks whose type is not selected (mlm) are scored but left out of the average that selects the best epoch.
        selected = {n: s for n, s in scores.items() if self.task_defs[n].task_type.selected}
        average = average_score(selected, {n: self.task_defs[n].metric_names for n in selected})
        for name, task_scores in scores.items():
            for metric, value in task_scores.items():
                self.log(f"dev/{name}/{metric}", value)  # compute() already reduced across ranks
        self.log("dev/average", average, prog_bar=True)
        self.dev_history.append({"epoch": self.current_epoch + 1, "step": self.global_step, "tasks": scores,
                                 "average": average})

    def configure_optimizers(self):
        from transformers import get_linear_schedule_with_warmup

        groups = parameter_groups(self.model, self.hparams.weight_decay)
        # Fused AdamW (one kernel for all parameters) wherever there is no gradient scaler; under 16-mixed the
        # scaler must unscale the gradients before clipping, which a fused optimizer would do inside step().
        fused = getattr(self.trainer.precision_plugin, "scaler", None) is None
        try:
            optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, fused=fused or None)
        except (RuntimeError, ValueError):  # fused kernels not available for this device or dtype
            optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr)
        total = max(1, self.total_steps())
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.hparams.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def total_steps(self) -> int:
        """Optimizer steps of the whole run, from the schedule's length.

        Lightning's ``estimated_stepping_batches`` would build the train loader before a checkpoint is restored,
        and Lightning then never restores the loader's position: a resumed run would replay its epoch.
        """
        sampler = getattr(self.trainer.datamodule, "train_sampler", None)
        if sampler is None or not self.trainer.max_epochs or self.trainer.max_epochs < 0:
            return int(self.trainer.estimated_stepping_batches)
        total = self.trainer.max_epochs * -(-len(sampler) // self.trainer.accumulate_grad_batches)
        return min(total, self.trainer.max_steps) if self.trainer.max_steps > 0 else total

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.check_finite("before saving a checkpoint")  # raising here keeps the previous checkpoint file
        # rank 0's RNG states; every rank's own are in rng-rank<r>.pt beside last.ckpt (save_rank_rng)
        checkpoint["mtdnn"] = {"dev_history": self.dev_history, "step_log": [list(s) for s in self.step_log],
                               "rng": rng_state(), "world_size": self.trainer.world_size}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("mtdnn", {})
        self.dev_history = list(state.get("dev_history", []))
        self.step_log = [tuple(s) for s in state.get("step_log", [])]
        self._rng_to_restore = state.get("rng")
        trainer = self._trainer
        ckpt_path = getattr(trainer, "ckpt_path", None) if trainer is not None else None
        if ckpt_path and trainer.world_size > 1:  # each rank continues its own random streams (dropout)
            own = load_rank_rng(Path(ckpt_path).parent, trainer.global_rank, checkpoint.get("global_step"))
            if own is not None:
                self._rng_to_restore = own

    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        # Restore the RNG states of the checkpoint just before the first step after a resume: nothing between
        # a save and the next step draws random numbers, so dropout continues as in an uninterrupted run.
        if getattr(self, "_rng_to_restore", None):
            set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Set every ``nn.Dropout`` of ``model`` (encoder attention and hidden dropout, heads) to probability ``p``."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
    config = getattr(getattr(model, "encoder", None), "config", None)
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout"):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, p)


def rng_state() -> dict:
    """Python, NumPy, torch CPU and CUDA RNG states as plain values and tensors (``weights_only``-loadable)."""
    import random

    import numpy as np

    np_state = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"python": list(internal), "python_gauss": gauss_next,
             "numpy": torch.from_numpy(np_state[1].astype("int64")), "numpy_pos": int(np_state[2]),
             "numpy_gauss": [int(np_state[3]), float(np_state[4])], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


RANK_RNG_FILE = "rng-rank{rank}.pt"


def save_rank_rng(directory: Path, rank: int, world_size: int, global_step: int) -> Path:
    """Write this rank's RNG states (:func:`rng_state`) to ``directory/rng-rank<rank>.pt`` atomically, with the
    global step of the checkpoint they belong to and the world size; no collective (every rank writes its own).

    Raises:
        UserError: the file cannot be written (the previous one is kept).
    """
    from ..fileio import write_torch_atomic

    path = Path(directory) / RANK_RNG_FILE.format(rank=rank)
    write_torch_atomic(path, {"global_step": int(global_step), "world_size": int(world_size), "rank": int(rank),
                              "rng": rng_state()})
    return path


def load_rank_rng(directory: Path, rank: int, global_step: int | None) -> dict | None:
    """This rank's RNG states saved beside a checkpoint of ``global_step`` (:func:`save_rank_rng`); None, with a
    warning that the resumed run will not be exact, when the file is missing, unreadable or of another step."""
    import logging

    path = Path(directory) / RANK_RNG_FILE.format(rank=rank)
    from ..errors import UserError
    from ..fileio import read_checkpoint

    problem = None
    try:
        saved = read_checkpoint(path) if path.is_file() else None
        if saved is None:
            problem = "it is missing"
        elif "rng" not in saved:
            problem = "not an RNG state file"
        elif global_step is not None and saved.get("global_step") != global_step:
            problem = f"it is of step {saved.get('global_step')}, the checkpoint of step {global_step}"
    except UserError as err:  # truncated or damaged: resume all the same, not exactly
        problem = f"it cannot be read ({err})"
    if problem is not None:
        logging.getLogger("mtdnn.train").warning(
            "rank %d: %s: %s; this rank continues with rank 0's random state, so the resumed run is not exactly "
            "the uninterrupted one", rank, path, problem)
        return None
    return saved["rng"]


def set_rng_state(state: dict) -> None:
    """Inverse of :func:`rng_state`."""
    import random

    import numpy as np

    random.setstate((3, tuple(state["python"]), state["python_gauss"]))
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype("uint32"), state["numpy_pos"], has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
