"""The training step never waits for the device, and a diverging run stops cleanly.

Inside ``training_step``, ``Tensor.item``, ``Tensor.tolist``, ``Tensor.__bool__`` and
``torch.distributed.all_reduce`` are replaced by functions that raise: any host-device synchronisation or
collective in the toolkit's step (or, with the encoder compiled, in the encoder) fails the test. Non-finite losses
and gradient norms only set a flag on the device that the host reads at logging intervals and before each
checkpoint; a diverging run then exits non-zero, writes no metrics.json and keeps the last checkpoint saved
before the divergence.
"""

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from mtdnn.train import main
from mtdnn.training.callbacks import NonFiniteGuard
from mtdnn.training.runs import DIVERGED_EXIT_CODE

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def tiny_module_and_batches(encoder: str, steps: int):
    """A one-task (RTE: glue.yaml's SAN head) MultiTaskModule and ``steps`` random batches of 8 rows, as the
    scheduled loader gives them (with SAN's ``sequence_ids``: premise, hypothesis, -1 on [CLS] and padding)."""
    from mtdnn.tasks.batch import Batch
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.training.module import MultiTaskModule

    torch.manual_seed(0)
    task = load_task_defs(GLUE)["rte"]
    module = MultiTaskModule(encoder, {"rte": task.to_plain()}, dev_tasks=[], lr=1e-3)
    batches = []
    for _ in range(steps):
        ids = torch.randint(1000, 2000, (8, 24))
        mask = torch.ones_like(ids)
        mask[4:, 16:] = 0
        sequence_ids = torch.zeros_like(ids)
        sequence_ids[:, 10:] = 1
        sequence_ids[:, 0] = -1
        sequence_ids[mask == 0] = -1
        head_inputs = {"sequence_ids": sequence_ids} if task.head_type == "san" else {}
        batches.append(Batch(task="rte", input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                             idx=torch.arange(8), labels=torch.randint(0, 2, (8,)), weight=torch.ones(8), examples=8,
                             global_examples=8, head_inputs=head_inputs))
    return module, torch.utils.data.DataLoader(batches, batch_size=None)


class Forbidden(RuntimeError):
    pass


def forbid_sync(monkeypatch, calls: list):
    """Wrap MultiTaskModule.training_step so that host syncs and collectives raise inside it."""
    import torch.distributed

    from mtdnn.training.module import MultiTaskModule

    original = MultiTaskModule.training_step
    names = {"item": torch.Tensor, "tolist": torch.Tensor, "__bool__": torch.Tensor, "all_reduce": torch.distributed}

    def raiser(name):
        def fail(*args, **kwargs):
            raise Forbidden(f"{name} called inside training_step")
        return fail

    def guarded(self, batch, batch_idx):
        saved = {name: getattr(owner, name) for name, owner in names.items()}
        for name, owner in names.items():
            setattr(owner, name, raiser(name))
        try:
            return original(self, batch, batch_idx)
        finally:
            for name, owner in names.items():
                setattr(owner, name, saved[name])
            calls.append(batch_idx)

    monkeypatch.setattr(MultiTaskModule, "training_step", guarded)


def test_the_raisers_do_fire(monkeypatch, tiny_encoder):
    """The guard itself: a step that calls .item() fails (so the test below could fail). The encoder runs eagerly
    here, so the Hugging Face mask check (``mask.all()`` read by Python) may trip the guard first."""
    from mtdnn.training.module import MultiTaskModule

    original = MultiTaskModule.task_loss
    monkeypatch.setattr(MultiTaskModule, "task_loss", lambda self, b, o: original(self, b, o) * b.weight.sum().item())
    calls = []
    forbid_sync(monkeypatch, calls)
    module, loader = tiny_module_and_batches(tiny_encoder, steps=1)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(Forbidden, match="(item|__bool__) called inside training_step"):
        trainer.fit(module, train_dataloaders=loader)


def test_five_training_steps_without_host_sync(monkeypatch, data_dir, tiny_encoder, tokenizer):
    """The toolkit's DataModule and module under a Lightning Trainer, clipping on, encoder compiled (dynamo traces
    the Hugging Face mask check that would otherwise read the mask on the host)."""
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.speed import compile_encoder

    tasks = select_tasks(load_task_defs(GLUE), ["rte", "stsb"], GLUE)
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=8, seed=1, limit_train_examples=24,
                                     length_buckets=[64, 128])
    datamodule.mark_shapes = "buckets"
    module = MultiTaskModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()}, dev_tasks=[])
    compile_encoder(module.model.encoder, "eager", [64, 128])
    calls = []
    forbid_sync(monkeypatch, calls)
    guard = NonFiniteGuard()
    trainer = pl.Trainer(accelerator="cpu", max_steps=5, gradient_clip_val=1.0, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=[guard])
    trainer.fit(module, datamodule=datamodule)
    assert calls == [0, 1, 2, 3, 4] and trainer.global_step == 5
    assert {t for _, t in module.step_log} == {"rte", "stsb"}
    assert guard.flag is not None and not bool(guard.flag)


def test_global_example_count_comes_from_the_schedule(data_dir, tokenizer):
    """Every rank of a 3-rank layout gets the step's global count of real rows, with no communication."""
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule

    tasks = select_tasks(load_task_defs(GLUE), ["rte"], GLUE)
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=8, seed=1, limit_train_examples=20)
    datamodule.setup("fit")
    per_rank = []
    for rank in range(3):
        datamodule.train_sampler.rank, datamodule.train_sampler.world_size = rank, 3
        per_rank.append([(b.global_examples, b.examples, int(b.weight.sum()))
                         for b in datamodule.train_dataloader()])
    for step in zip(*per_rank):  # batches of 8, 8, 4 rows
        assert len({g for g, _, _ in step}) == 1
        assert step[0][0] == sum(e for _, e, _ in step) == sum(w for _, _, w in step)
    assert sorted(s[0] for s in per_rank[0]) == [4, 8, 8]
    assert {(g, e) for g, e, _ in per_rank[2]} == {(8, 2), (4, 1)}  # rank 2 holds rows 2, 5 of 8 and row 2 of 4


def test_diverging_run_stops_and_keeps_the_last_checkpoint_before_it(monkeypatch, tmp_path, data_dir, tiny_encoder,
                                                                     capsys):
    """A loss that turns infinite at step 6 (of 8): checkpoints every 2 steps; the one of step 4 is kept, the save
    at step 6 is refused, the exit code is non-zero and there is no metrics.json."""
    from mtdnn.errors import run_cli
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.runs import load_checkpoint_file

    original = MultiTaskModule.task_loss

    def poisoned(self, batch, outputs):
        loss = original(self, batch, outputs)
        return loss * float("inf") if self.training and self.trainer.global_step >= 5 else loss

    monkeypatch.setattr(MultiTaskModule, "task_loss", poisoned)
    run_dir = tmp_path / "run"
    args = [GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
            "--limit-train-examples", "32", "--batch-size", "8", "--max-epochs", "2", "--accelerator", "cpu",
            "--checkpoint-every-n-steps", "2", "--output-dir", str(run_dir)]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, args)
    assert exit_info.value.code == DIVERGED_EXIT_CODE != 0
    err = capsys.readouterr().err
    assert "training diverged" in err and "last.ckpt" in err and "no metrics.json" in err
    assert not (run_dir / "metrics.json").exists()
    checkpoint = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")
    assert checkpoint["global_step"] == 4
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values() if v.is_floating_point())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: torch.cuda.set_sync_debug_mode('error')")
def test_no_cuda_sync_inside_training_step_on_a_gpu(data_dir):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_sync_check.py"), "--data-dir", str(data_dir)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "OK:" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
