"""The LightningModule of multi-task training: forward, losses, dev metrics, optimizer (research code only).

Devices, precision, DDP, checkpoints and loggers belong to the Trainer built by :mod:`mtdnn.training.pipeline`.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from transformers import get_linear_schedule_with_warmup

from ..modeling.metrics import attach_split, average_score, build_metrics, compute_metrics, update_metrics
from ..modeling.model import MultiTaskModel, load_encoder
from ..tasks.taskdef import TaskDef


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
        encoder_model: the encoder already loaded (a student's truncated copy, saved to ``encoder`` by the
            pipeline before training); not a hyper-parameter. Default: loaded from ``encoder``.
    """

    def __init__(self, encoder: str, tasks: dict[str, dict], dev_tasks: list[str] | None = None, lr: float = 5e-5,
                 weight_decay: float = 0.01, warmup_ratio: float = 0.1, dropout: float | None = None,
                 trust_remote_code: bool = False, encoder_model: torch.nn.Module | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["encoder_model"])
        self.task_defs = {name: TaskDef(**spec) for name, spec in tasks.items()}
        loaded = encoder_model if encoder_model is not None else load_encoder(encoder, trust_remote_code)
        self.model = MultiTaskModel(loaded, self.task_defs)
        if dropout is not None:
            set_dropout(self.model, dropout)
        self.dev_task_names = dev_tasks if dev_tasks is not None else [
            n for n, t in self.task_defs.items() if "dev" in t.splits]
        self.dev_metrics = torch.nn.ModuleDict({n: build_metrics(self.task_defs[n]) for n in self.dev_task_names})
        self.dev_history: list[dict] = []   # one entry per completed epoch: {"epoch", "tasks", "average"}
        self.step_log: list[tuple[int, str]] = []  # (epoch, task) of every optimizer step, for schedule.json
        self.grad_norm: torch.Tensor | None = None  # the last clipped step's total norm (0-d, on the device)

    def forward(self, batch: dict) -> torch.Tensor:
        return self.model(batch.task, batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs)

    def on_train_epoch_end(self) -> None:
        # the epoch row's step in metrics.csv: the optimizer steps done, as the dev rows' (Lightning's is one less)
        self.log("step", float(self.global_step), on_step=False, on_epoch=True)

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
        if batch.global_examples is not None:
            return max(int(batch.global_examples), 1) / (world * accumulation)
        if world > 1:
            raise RuntimeError("a training batch without global_examples under DDP (use MultiTaskDataModule)")
        return batch.weight.sum().clamp(min=1.0)

    def task_loss(self, batch: dict, outputs: torch.Tensor) -> torch.Tensor:
        """The task's loss, normalised by the real examples of the optimizer step (:meth:`normalizer`)."""
        task = self.task_defs[batch.task]
        return task.loss_weight * task.kind.loss(task)(outputs, batch.labels, batch.weight, self.loss_normalizer(batch))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        """One task's batch: forward, loss, logging. No host-device synchronisation happens here: the logged
        batch size is counted on the host by the collator (a non-finite loss is caught by the Trainer's
        :class:`~mtdnn.training.callbacks.NonFiniteGuard`, which reads it without synchronising)."""
        loss = self.task_loss(batch, self(batch))
        size = len(batch.weight) if batch.examples is None else batch.examples
        # the epoch's mean per task; per logging step, TrainingProgress logs each task's mean since the last one
        self.log(f"train/{batch.task}_loss_epoch", loss, on_step=False, on_epoch=True, batch_size=size)
        self.step_log.append((self.current_epoch, batch.task))
        return loss

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the gradient norm with ``torch.nn.utils.clip_grad_norm_``; keep the norm as ``self.grad_norm``.

        Called by Lightning after backward (and, under ``16-mixed``, after the gradient scaler has unscaled the
        gradients, which is why that precision keeps a non-fused optimizer). Calling ``clip_grad_norm_``
        directly, rather than Lightning's ``clip_gradients``, lets a fused AdamW be clipped under ``bf16-mixed``
        (Lightning's mixed-precision plugin refuses any fused optimizer). The total norm (a 0-d tensor, never
        read on the host here), which clipping computes anyway, is what
        :class:`~mtdnn.training.callbacks.NonFiniteGuard` checks.
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
        self.grad_norm = norm
        return None

    def on_validation_epoch_start(self) -> None:
        # Metrics that decode whole questions from their windows (span extraction) read the dev split's offsets.
        dev_sets = getattr(getattr(self.trainer, "datamodule", None), "dev_sets", {})
        for name in self.dev_task_names:
            if name in dev_sets:
                attach_split(self.dev_metrics[name], dev_sets[name])

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        task = self.task_defs[batch.task]
        update_metrics(self.dev_metrics[task.name], task.type, self(batch), batch.labels, batch.weight)

    def on_validation_epoch_end(self) -> None:
        scores = {name: compute_metrics(self.dev_metrics[name]) for name in self.dev_task_names}
        for metrics in self.dev_metrics.values():
            metrics.reset()
        if self.trainer.sanity_checking or not scores:
            return  # nothing is recorded during Lightning's sanity check
        # Tasks whose type is not selected (mlm) are scored but left out of the average that selects the best epoch.
        selected = {n: s for n, s in scores.items() if self.task_defs[n].kind.selected}
        average = average_score(selected, {n: self.task_defs[n].metric_names for n in selected})
        for name, task_scores in scores.items():
            for metric, value in task_scores.items():
                self.log(f"dev/{name}/{metric}", value)  # compute() already reduced across ranks
        self.log("dev/average", average, prog_bar=True)
        # the CSV row's step: the optimizer steps done, as metrics.json's (Lightning's default is one less here)
        self.log_dict({"step": float(self.global_step), "epoch": float(self.current_epoch)})
        self.dev_history.append({"epoch": self.current_epoch + 1, "step": self.global_step, "tasks": scores,
                                 "average": average})

    def configure_optimizers(self):
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
        # the research state of a resumed run: its dev evaluations and the schedule so far (RNG states and the
        # world size are the Trainer's callbacks', mtdnn.training.callbacks and mtdnn.training.stopping)
        checkpoint.setdefault("mtdnn", {}).update(dev_history=self.dev_history,
                                                  step_log=[list(s) for s in self.step_log])

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("mtdnn", {})
        self.dev_history = list(state.get("dev_history", []))
        self.step_log = [tuple(s) for s in state.get("step_log", [])]


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Set every ``nn.Dropout`` of ``model`` (encoder attention and hidden dropout, heads) to probability ``p``."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
    config = getattr(getattr(model, "encoder", None), "config", None)
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout"):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, p)
