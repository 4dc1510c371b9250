"""One run of the sweep: fine-tune a fresh copy of an encoder on a subset, then score the evaluation split once."""

from __future__ import annotations

from pathlib import Path

import torch

from ...tasks.taskdef import TaskDef
from .encoders import Encoder
from .settings import TransferSettings

def fine_tune(encoder: Encoder, task: TaskDef, train_set, tokenizer, settings: TransferSettings, seed: int,
              accelerator: str = "auto", precision: str = "32-true", root_dir: Path | None = None,
              trust_remote_code: bool = False):
    """Fine-tune a fresh copy of ``encoder`` (and a fresh or reused head) on ``train_set``; no validation.

    Uses the toolkit's :class:`~mtdnn.training.module.MultiTaskModule` with one task and a Lightning Trainer on one
    device. Returns ``(module, trainer)``; the module is back on CPU (Lightning's teardown).
    """
    import pytorch_lightning as pl

    from ...training.datamodule import MultiTaskDataModule

    from ...training.module import MultiTaskModule
    from ...tasks.schedule import MultiTaskBatchSampler, TaskSize

    class SubsetDataModule(MultiTaskDataModule):
        """One task's training subset, already tokenized; no dev loader (the evaluation comes after training)."""

        def prepare_data(self) -> None:
            pass

        def setup(self, stage: str | None = None) -> None:
            self.train_sets, self.dev_sets = [train_set], {}
            self.train_sampler = MultiTaskBatchSampler([TaskSize(train_set.lengths)], self.batch_size,
                                                       seed=self.seed)
            self._rank, self._world = 0, 1

        def val_dataloader(self) -> list:
            return []

    pl.seed_everything(seed, workers=True, verbose=False)
    module = MultiTaskModule(encoder.path, {task.name: task.to_plain()}, dev_tasks=[], lr=settings.lr,
                             weight_decay=settings.weight_decay, warmup_ratio=settings.warmup_ratio,
                             trust_remote_code=trust_remote_code)
    if encoder.head_state is not None:
        module.model.heads[task.name].load_state_dict(encoder.head_state)
    datamodule = SubsetDataModule({task.name: task}, data_dir=None, tokenizer=tokenizer,
                                  batch_size=settings.batch_size(len(train_set)), seed=seed)
    trainer = pl.Trainer(max_epochs=settings.epochs, accelerator=accelerator, devices=1, precision=precision,
                         gradient_clip_val=settings.gradient_clip or None, limit_val_batches=0,
                         num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                         default_root_dir=root_dir, deterministic=False)
    trainer.fit(module, datamodule=datamodule)
    return module, trainer


@torch.inference_mode()
def evaluate_split(model, task: TaskDef, split, pad_token_id: int, batch_size: int,
                   device: torch.device | str = "cpu") -> dict[str, float]:
    """Score ``model`` on every row of a labelled ``split`` once: ``{metric: value}`` of the task's metrics.

    The batching and metric updates of :func:`mtdnn.training.inference.predict_outputs` (length-sorted batches, as
    training's validation does).
    """
    from ...training.inference import predict_outputs
    from ...modeling.metrics import build_metrics, compute_metrics

    model.eval().to(device)
    metrics = build_metrics(task).to(device)
    predict_outputs(model, task, split, pad_token_id, batch_size, metrics=metrics, device=device)
    return compute_metrics(metrics)
