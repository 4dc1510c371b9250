"""Every precision Lightning accepts on the CPU trains the 4-task job with clipping on; bad precisions and
incompatible options are refused before any file is written; fused AdamW is used wherever it can be clipped."""

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from mtdnn.errors import run_cli
from mtdnn.train import main

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")
TASKS = "rte,mrpc,stsb,cola"  # the main job's tasks


def job_args(run_dir, data_dir, encoder, *extra):
    """The main job's shape, cut to 8 optimizer steps: 4 tasks x 32 rows, batch 16, one epoch, clipping 1.0."""
    return [GLUE, "--tasks", TASKS, "--data-dir", str(data_dir), "--encoder", encoder,
            "--limit-train-examples", "32", "--batch-size", "16", "--max-epochs", "1", "--lr", "2e-3",
            "--dropout", "0", "--gradient-clip", "1.0", "--accelerator", "cpu", "--keep-last-checkpoint",
            "--output-dir", str(run_dir), *extra]


def train_set_loss(module, data_dir, tokenizer) -> float:
    """Mean loss of ``module`` (fp32, eval mode) over the 8 training batches of the job above."""
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule

    tasks = select_tasks(load_task_defs(GLUE), TASKS.split(","), GLUE)
    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=16, seed=42, limit_train_examples=32)
    datamodule.setup("fit")
    module.float().eval()
    with torch.no_grad():
        losses = [module.task_loss(b, module(b)).item() for b in datamodule.train_dataloader()]
    assert len(losses) == 8
    return sum(losses) / len(losses)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "16-mixed", "64-true"])
def test_every_precision_trains_with_clipping_and_reloads(tmp_path, data_dir, tiny_encoder, tokenizer, precision):
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.runs import load_checkpoint_file
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    run_dir = tmp_path / precision
    assert main(job_args(run_dir, data_dir, tiny_encoder, "--precision", precision)) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "complete" and metrics["best"]["average"] == metrics["best"]["average"]
    assert json.loads((run_dir / "schedule.json").read_text())["steps"] == 8

    tasks = select_tasks(load_task_defs(GLUE), TASKS.split(","), GLUE)
    pl.seed_everything(42, verbose=False)  # the initialisation main() starts from
    module = MultiTaskModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()}, lr=2e-3, dropout=0.0)
    before = train_set_loss(module, data_dir, tokenizer)
    checkpoint = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")
    assert checkpoint["global_step"] == 8
    module.load_state_dict(checkpoint["state_dict"])  # strict: every parameter is there, nothing extra
    after = train_set_loss(module, data_dir, tokenizer)
    assert torch.isfinite(torch.tensor(after)) and after < before - 0.05, (before, after)


@pytest.mark.parametrize("precision, fused", [("32-true", True), ("bf16-mixed", True), ("16-mixed-scaler", False)])
def test_fused_adamw_where_clipping_allows_it(tiny_encoder, precision, fused):
    """A direct Trainer: under a gradient scaler (fp16 AMP, built by hand since Lightning maps 16-mixed to bf16 on
    a CPU) the optimizer is not fused and clipping runs after unscaling; elsewhere it is fused and still clipped."""
    from pytorch_lightning.plugins.precision import MixedPrecision

    from mtdnn.training.module import MultiTaskModule
    from test_no_sync import tiny_module_and_batches

    module, loader = tiny_module_and_batches(tiny_encoder, steps=3)
    norms = []

    clip = module.configure_gradient_clipping

    def clip_and_watch(optimizer, *args, **kwargs):  # the norm after the module's clipping
        clip(optimizer, *args, **kwargs)
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.nn.utils.get_total_norm(grads)))

    module.configure_gradient_clipping = clip_and_watch

    kwargs = dict(precision=precision)
    if precision == "16-mixed-scaler":
        kwargs = dict(plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
    trainer = pl.Trainer(accelerator="cpu", max_steps=3, gradient_clip_val=0.01, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         **kwargs)
    trainer.fit(module, train_dataloaders=loader)
    optimizer = trainer.optimizers[0]
    assert bool(optimizer.defaults.get("fused")) is fused
    assert norms and all(n <= 0.01 * 1.01 for n in norms), norms  # clipped (after unscaling, under the scaler)
    assert isinstance(module, MultiTaskModule)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--precision", "transformer-engine"], "valid precisions here: 32-true, bf16-mixed"),
        (["--precision", "bogus"], "valid precisions here: 32-true, bf16-mixed"),
        (["--cuda-graphs"], "--cuda-graphs needs --compile"),
        (["--compile", "inductor", "--cuda-graphs", "--length-buckets", "64,128"], "--cuda-graphs needs a GPU"),
        (["--compile", "eager", "--length-buckets", "32,64"], "longer than the last of --length-buckets"),
        (["--length-buckets", "64,36,128"], "ascending"),
        (["--length-buckets", "60,128", "--pad-to-multiple-of", "8"], "multiples of --pad-to-multiple-of"),
    ],
)
def test_refused_before_any_file_is_written(tmp_path, data_dir, tiny_encoder, capsys, extra, message):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, job_args(run_dir, data_dir, tiny_encoder, *extra))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()
