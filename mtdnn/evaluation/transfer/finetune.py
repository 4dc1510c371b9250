"""One run of the sweep: fine-tune a fresh copy of an encoder on a subset, then score the evaluation split once."""

from __future__ import annotations

from pathlib import Path

import torch

from ...modeling.metrics import build_metrics, compute_metrics
from ...tasks.schedule import MultiTaskBatchSampler, TaskSize
from ...tasks.taskdef import TaskDef
from ...training import pipeline
from ...training.config import TrainConfig
from ...training.datamodule import MultiTaskDataModule
from ...training.inference import predict_outputs
from ...training.module import MultiTaskModule
from .encoders import Encoder
from .settings import TransferSettings


def fine_tune(encoder: Encoder, task: TaskDef, train_set, tokenizer, settings: TransferSettings, seed: int,
              accelerator: str = "auto", precision: str = "32-true", root_dir: Path | None = None,
              trust_remote_code: bool = False):
    """Fine-tune a fresh copy of ``encoder`` (and a fresh or reused head) on ``train_set``; no validation.

    The toolkit's training pipeline (:mod:`mtdnn.training.pipeline`: its checks, its one Trainer) with one task on
    one device, writing nothing (the sweep keeps its own ``per_run/`` records). Returns ``(module, trainer)``; the
    module is back on CPU (Lightning's teardown).

    Raises:
        ConfigError: a setting, flag or length the pipeline refuses (as ``train`` would).
    """

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

    def module_factory(config, path, tasks, encoder_model):
        module = MultiTaskModule(path, {task.name: task.to_plain()}, dev_tasks=[], lr=config.lr,
                                 weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio,
                                 trust_remote_code=config.trust_remote_code)
        if encoder.head_state is not None:
            module.model.heads[task.name].load_state_dict(encoder.head_state)
        return module

    def datamodule_factory(config, tasks, tokenizer):
        return SubsetDataModule(tasks, data_dir=None, tokenizer=tokenizer, batch_size=config.batch_size,
                                seed=config.seed)

    config = TrainConfig(task_defs="transfer", tasks=[task.name], encoder=encoder.path,
                         **settings.train_overrides(len(train_set)), seed=seed, accelerator=accelerator, devices=1,
                         precision=precision, trust_remote_code=trust_remote_code)
    run = pipeline.plan(config, tasks={task.name: task}, encoder=encoder.path, tokenizer=tokenizer,
                        module_factory=module_factory, datamodule_factory=datamodule_factory,
                        outputs=pipeline.FINE_TUNE_ONLY, check_data_files=False, root_dir=root_dir)
    result = pipeline.execute(run)
    return result.module, result.trainer


@torch.inference_mode()
def evaluate_split(model, task: TaskDef, split, pad_token_id: int, batch_size: int,
                   device: torch.device | str = "cpu") -> dict[str, float]:
    """Score ``model`` on every row of a labelled ``split`` once: ``{metric: value}`` of the task's metrics.

    The batching and metric updates of :func:`mtdnn.training.inference.predict_outputs` (length-sorted batches, as
    training's validation does).
    """

    model.eval().to(device)
    metrics = build_metrics(task).to(device)
    predict_outputs(model, task, split, pad_token_id, batch_size, metrics=metrics, device=device)
    return compute_metrics(metrics)
