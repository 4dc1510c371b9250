"""On a GPU: no host-device synchronisation inside ``training_step`` (``torch.cuda.set_sync_debug_mode("error")``).

    python3 bench/gpu_sync_check.py --data-dir .gpu-carry/data --tokenizer .gpu-carry/minilm   # run by gpu_run.sh

The toolkit's :class:`~mtdnn.training.datamodule.MultiTaskDataModule` (RTE and STS-B, 24 rows each, batch 8, one
length bucket of 128 so that every batch has one shape) and :class:`~mtdnn.training.module.MultiTaskModule`
(a random 2-layer BERT, encoder compiled with inductor) under a Lightning ``Trainer`` (bf16-mixed, clipping 1.0)
for 2 epochs of 6 steps. The first epoch compiles; during the second epoch's first 5 steps every
``training_step`` runs under sync debug mode ``error``, so any synchronising CUDA call raises. Prints ``OK`` and
exits 0, or the error and exits 1. ``tests/test_no_sync.py`` runs it when CUDA is available.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--tokenizer", default="packaged-minilm")
    p.add_argument("--compile", default="inductor")
    p.add_argument("--accelerator", default="gpu", help="cpu: a check of this script's code (no sync mode there)")
    args = p.parse_args(argv)
    gpu = args.accelerator != "cpu"

    import pytorch_lightning as pl
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mtdnn.modeling.model import load_tokenizer, resolve_encoder
    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.speed import compile_encoder

    encoder = Path(tempfile.mkdtemp(prefix="sync-check-"))
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128)).save_pretrained(encoder)
    AutoTokenizer.from_pretrained(resolve_encoder(args.tokenizer)).save_pretrained(encoder)
    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), ["rte", "stsb"], str(defs))
    datamodule = MultiTaskDataModule(tasks, resolve_data_dir(args.data_dir), load_tokenizer(str(encoder)),
                                     batch_size=8, seed=1, limit_train_examples=24, length_buckets=[128])
    datamodule.mark_shapes = "buckets"
    module = MultiTaskModule(str(encoder), {n: t.to_plain() for n, t in tasks.items()}, dev_tasks=[])
    if args.compile != "none":
        compile_encoder(module.model.encoder, args.compile, [128])
    checked = []
    original = MultiTaskModule.training_step

    def guarded(self, batch, batch_idx):
        if self.current_epoch == 0 or batch_idx >= 5:
            return original(self, batch, batch_idx)
        if gpu:
            torch.cuda.set_sync_debug_mode("error")
        try:
            return original(self, batch, batch_idx)
        finally:
            if gpu:
                torch.cuda.set_sync_debug_mode("default")
            checked.append(batch_idx)

    MultiTaskModule.training_step = guarded
    try:
        trainer = pl.Trainer(accelerator=args.accelerator, devices=1, precision="bf16-mixed" if gpu else "32-true",
                             max_epochs=2,
                             gradient_clip_val=1.0, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, datamodule=datamodule)
    except RuntimeError as err:
        print(f"FAILED: a synchronising CUDA call inside training_step: {err}")
        return 1
    finally:
        MultiTaskModule.training_step = original
    if checked != [0, 1, 2, 3, 4]:
        print(f"FAILED: checked steps {checked}, expected 0..4 of the second epoch")
        return 1
    mode = "torch.cuda.set_sync_debug_mode('error')" if gpu else "no sync mode (CPU: a check of the code)"
    print(f"OK: 5 training steps under {mode}, compile {args.compile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
