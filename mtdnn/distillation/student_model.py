"""The student's research code: batches of ``distill`` tasks carry the teachers' soft targets, and the multi-task
module's loss of those tasks is the distillation loss (MT-DNN-KD, arXiv 1904.09482)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..tasks.taskdef import TaskDef
from ..training.datamodule import MultiTaskDataModule
from ..training.module import MultiTaskModule
from .batch_targets import batch_targets
from .soft_targets import align


class SoftTargetCollator:
    """Wraps the training loader's :class:`~mtdnn.training.datamodule.TaskCollator`: a batch of a ``distill`` task also gets
    ``teacher_logits`` ``(batch, members, outputs)`` float32, the rows ``batch.idx`` of the task's soft targets
    (per-piece types: ``(batch, members, seq_len, width)``, :mod:`mtdnn.distillation.piece_targets`)."""

    def __init__(self, base, teacher_logits: dict):
        self.base, self.teacher_logits = base, teacher_logits

    def __call__(self, features: list[dict[str, Any]]) -> dict:
        batch = self.base(features)
        task_index = features[0].get("task_index", 0)
        if task_index in self.teacher_logits:
            batch.teacher_logits = self.teacher_logits[task_index].for_batch(batch)
        return batch


class DistillationDataModule(MultiTaskDataModule):
    """:class:`~mtdnn.training.datamodule.MultiTaskDataModule` whose training batches of ``distill`` tasks carry the teacher
    members' outputs.

    Args:
        soft_targets: ``{task: (ids, outputs)}`` with ``outputs`` ``(len(ids), members, outputs)`` float32 keyed by
            example id; aligned once, in :meth:`setup`, to the rows of the task's training split (an id of the
            split missing from ``ids`` is an error, never a silent misalignment).
        other arguments: see :class:`~mtdnn.training.datamodule.MultiTaskDataModule`.
    """

    def __init__(self, tasks: dict[str, TaskDef], data_dir: Path, tokenizer,
                 soft_targets: dict[str, tuple[list[str], np.ndarray]], **kwargs):
        super().__init__(tasks, data_dir, tokenizer, **kwargs)
        self.soft_targets = soft_targets
        self.teacher_logits: dict = {}  # task index -> batch_targets(...)

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        self.teacher_logits = {}
        for index, (name, split) in enumerate(zip(self.tasks, self.train_sets)):
            if name in self.soft_targets:
                ids, outputs = self.soft_targets[name]
                rows = align(ids, outputs, split.ids, f"soft targets of task '{name}'")
                self.teacher_logits[index] = batch_targets(rows)

    def train_dataloader(self) -> DataLoader:
        loader = super().train_dataloader()
        loader.collate_fn = SoftTargetCollator(loader.collate_fn, self.teacher_logits)
        return loader


class DistillationModule(MultiTaskModule):
    """The multi-task module with the knowledge-distillation loss on ``distill_tasks`` (MT-DNN-KD).

    For a distill task's batch, with s the student's outputs and the batch's ``teacher_logits``::

        classification, ranking: alpha * T^2 * CE(q, softmax(s / T)) + (1 - alpha) * CE(s, gold),
                                 q = mean over members of softmax(z_m / T)
        regression:              alpha * (s - mean_m p_m)^2 + (1 - alpha) * (s - y)^2
        sequence labelling:      the classification loss at each labelled piece (a word's first), averaged
                                 over the sentence's labelled pieces
        span extraction:         the mean of the classification losses of the start and of the end
                                 distribution over the window's pieces (see mtdnn.modeling.token_heads)

    with the per-example weights and global normaliser of :mod:`mtdnn.modeling.losses` (DDP-correct). Other tasks keep
    their gold loss. Hyper-parameters are plain Python values (checkpoints load with ``weights_only=True``); the
    soft targets come with the batches (:class:`DistillationDataModule`), never in the hyper-parameters.

    Args:
        distill_tasks: the tasks trained on soft targets. temperature: T > 0. alpha: in [0, 1].
        other arguments: see :class:`~mtdnn.training.module.MultiTaskModule`.
    """

    def __init__(self, encoder: str, tasks: dict[str, dict], distill_tasks: list[str], temperature: float = 1.0,
                 alpha: float = 0.5, **kwargs):
        if not temperature > 0 or not 0 <= alpha <= 1:
            raise ValueError(f"temperature must be > 0 and alpha in [0, 1] (got {temperature}, {alpha})")
        super().__init__(encoder, tasks, **kwargs)
        # MultiTaskModule's save_hyperparameters() records distill_tasks, temperature and alpha too.

    def forward(self, batch: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Training batches of distill tasks: ``(outputs, tempered)`` at the temperature (see
        :meth:`mtdnn.modeling.model.MultiTaskModel.forward`); otherwise the outputs."""
        if not (self.training and batch.task in self.hparams.distill_tasks):
            return super().forward(batch)
        return self.model(batch.task, batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs,
                          temperature=self.hparams.temperature)

    def task_loss(self, batch: dict, outputs) -> torch.Tensor:
        if batch.task not in self.hparams.distill_tasks:
            return super().task_loss(batch, outputs)
        outputs, tempered = outputs if isinstance(outputs, tuple) else (outputs, None)
        if batch.teacher_logits is None:
            raise RuntimeError(f"a batch of distill task '{batch.task}' has no teacher_logits "
                               "(use DistillationDataModule)")
        task = self.task_defs[batch.task]
        # The normaliser of MultiTaskModule.task_loss: global real examples / world size (see mtdnn.modeling.losses).
        loss = task.kind.distillation_loss(task)(outputs, batch.teacher_logits, batch.labels, batch.weight,
                                                 self.loss_normalizer(batch), self.hparams.temperature,
                                                 self.hparams.alpha, student_tempered=tempered)
        return task.loss_weight * loss
