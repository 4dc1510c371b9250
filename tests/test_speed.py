"""Speed flags, correctness on the CPU: length buckets (padding that changes no output, a bounded set of compiled
graphs whatever the task of each step) and the attention-backend choice (same outputs, other kernels)."""

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def test_bucket_padding_changes_no_output(data_dir, tiny_encoder, tokenizer):
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.datamodule import TaskCollator

    task = load_task_defs(GLUE)["mrpc"]
    rows = [tokenized_split(task, "dev", data_dir, tokenizer)[i] for i in range(6)]
    plain = TaskCollator([task], tokenizer.pad_token_id)(rows)
    bucketed = TaskCollator([task], tokenizer.pad_token_id, length_buckets=[16, 96, 128])(rows)
    assert plain.input_ids.shape[1] < 96 and bucketed.input_ids.shape[1] == 96
    assert bucketed.examples == 6 and bucketed.attention_mask.sum() == plain.attention_mask.sum()
    module = MultiTaskModule(tiny_encoder, {"mrpc": task.to_plain()}).eval()
    with torch.no_grad():
        torch.testing.assert_close(module(bucketed), module(plain), atol=1e-5, rtol=1e-5)


def test_sdpa_backend_switches_kernels_not_results(tiny_encoder):
    from mtdnn.modeling.model import load_encoder
    from mtdnn.training.speed import set_sdpa_backend

    encoder = load_encoder(tiny_encoder).eval()
    ids = torch.randint(1000, 2000, (4, 20))
    mask = torch.ones_like(ids)
    mask[2:, 12:] = 0
    outputs = {}
    try:
        for name in ("auto", "efficient", "math"):
            set_sdpa_backend(name)
            backends = torch.backends.cuda
            assert backends.cudnn_sdp_enabled() is (name == "auto")
            assert backends.flash_sdp_enabled() is (name != "math") and backends.math_sdp_enabled()
            with torch.no_grad():
                outputs[name] = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
    finally:
        set_sdpa_backend("auto")
    torch.testing.assert_close(outputs["math"], outputs["auto"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs["efficient"], outputs["auto"], atol=1e-5, rtol=1e-5)


def test_compiled_encoder_with_buckets_keeps_a_bounded_set_of_graphs(data_dir, tiny_encoder, tokenizer):
    """Three tasks of different lengths, one task per step, short last batches, training and evaluation: with
    buckets the compiled encoder holds at most two graphs per bucket (grad on and off), and the recompile limit
    is never hit (it would silently fall back to eager)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.speed import compile_encoder

    buckets = [32, 64, 128]
    tasks = select_tasks(load_task_defs(GLUE), ["rte", "stsb", "cola"], GLUE)
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=8, eval_batch_size=16, seed=3,
                                     limit_train_examples=28, length_buckets=buckets)  # 4 batches a task, last of 4
    datamodule.mark_shapes = "buckets"
    module = MultiTaskModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()})
    torch._dynamo.reset()
    counters.clear()
    shapes, graphs_after_epoch = set(), []

    class Record(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            shapes.add(tuple(batch.input_ids.shape))

        def on_train_epoch_end(self, trainer, pl_module):
            graphs_after_epoch.append(counters["stats"]["unique_graphs"])

    saved = torch._dynamo.config.fail_on_recompile_limit_hit
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    try:
        compile_encoder(module.model.encoder, "eager", buckets)
        trainer = pl.Trainer(accelerator="cpu", max_epochs=2, limit_val_batches=2, gradient_clip_val=1.0, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0, callbacks=[Record()])
        trainer.fit(module, datamodule=datamodule)
    finally:
        torch._dynamo.config.fail_on_recompile_limit_hit = saved
        torch._dynamo.reset()
    assert trainer.global_step == 24 and {t for _, t in module.step_log} == {"rte", "stsb", "cola"}
    assert {s[1] for s in shapes} <= set(buckets) and len({s[1] for s in shapes}) >= 2  # lengths are buckets
    assert len({s[0] for s in shapes}) >= 2  # full and short batches
    assert graphs_after_epoch[-1] <= 2 * len(buckets) + 2, graphs_after_epoch
    assert graphs_after_epoch[-1] == graphs_after_epoch[-2], graphs_after_epoch  # nothing new in the last epoch


def test_compiled_encoder_without_buckets_compiles_once_per_grad_mode(data_dir, tiny_encoder, tokenizer):
    """--compile alone: batch and sequence marked dynamic, so many lengths and batch sizes share one graph for
    training and one for evaluation."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.speed import compile_encoder

    tasks = select_tasks(load_task_defs(GLUE), ["rte", "cola"], GLUE)
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=8, eval_batch_size=16, seed=3,
                                     limit_train_examples=28, pad_to_multiple_of=8)
    datamodule.mark_shapes = "dynamic"
    module = MultiTaskModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()})
    torch._dynamo.reset()
    counters.clear()
    shapes = set()

    class Record(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            shapes.add(tuple(batch.input_ids.shape))

    try:
        compile_encoder(module.model.encoder, "eager")
        trainer = pl.Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=2, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0, callbacks=[Record()])
        trainer.fit(module, datamodule=datamodule)
        graphs = counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()
    assert len({s[1] for s in shapes}) >= 3 and len({s[0] for s in shapes}) >= 2  # lengths and batch sizes vary
    assert graphs <= 2, graphs
