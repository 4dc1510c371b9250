"""GPU benchmark of the trainer users run: the toolkit's DataModule and module under the Lightning Trainer.

    # on a GPU machine without network, from the repository root (see bench/gpu_run.sh, which wraps this):
    python3 bench/trainer_speed.py --device cuda --data-dir .gpu-carry/data --tokenizer .gpu-carry/minilm \\
        --minilm .gpu-carry/minilm --json $OUT/trainer-speed.json
    # here, on the CPU, the same code on a tiny model (checks the code, not the speed; about a minute):
    .venv/bin/python bench/trainer_speed.py --tiny --json /tmp/trainer-speed-tiny.json

Cases (``--cases``):

- ``bert-base-256`` and ``bert-base-32``: BERT-base geometry (``BertConfig()``: 12 layers, hidden 768, random
  init, the uncased vocabulary of the MiniLM tokenizer) on the full train splits of RTE, MRPC, STS-B and CoLA,
  batch 256 and 32 (MT-DNN's batch), scheduled and padded by :class:`~mtdnn.training.datamodule.MultiTaskDataModule`
  exactly as ``mtdnn.train`` does, trained by :class:`~mtdnn.training.module.MultiTaskModule`. Side by side in
  one process: (1) one epoch under the Lightning ``Trainer`` as ``mtdnn.train`` builds it (precision, clipping
  1.0, fused AdamW, no checkpoints or logger: their I/O is not the step); (2) a plain PyTorch loop over the very
  same batches (the epoch-0 plan, collated on the CPU beforehand, pinned, copied without blocking) through the
  same module: forward, ``task_loss``, backward, ``clip_grad_norm_``, fused AdamW, under the same autocast;
  (3) 15 Lightning steps under ``torch.profiler``: the GPU-busy share (union of kernel intervals over the span from
  the first kernel to the last) and the kernels that take most GPU time per step.
- ``hf-reference``: a plain Hugging Face ``BertModel`` (BERT-base) with a linear head on the pooled output, one
  fixed 256 x 128 batch of real tokens, bf16 autocast, fused AdamW, clipping, compiled: the rate to compare with.
- ``minilm-main``: the main job (``python -m mtdnn.train`` in process: 4 tasks, 3 epochs, MiniLM, bf16-mixed,
  dev evaluation each epoch, checkpoints, export): time before the first optimizer step (tokenization, model
  load), the first step (compilation), from the first to the last optimizer step, and the dev scores against the
  CPU seeds' spread (``bench/results/glue-4task-seed4*-metrics.json``).

Every rate counts real tokens only (attention-mask ones); the first ``--warmup-steps`` (10) steps are excluded.
Compilation happens before the timed runs: each distinct batch shape of the epoch runs forward and backward
once first (three times with CUDA graphs), and that time is reported as ``compile_seconds``. Model FLOPs of a
step: 6 x non-embedding parameters x real tokens + 12 x layers x hidden x sum of squared real lengths (forward
and backward of the weights, and of attention scores and weighted values over each example's real length;
Kaplan et al. 2020, with the attention term of the PaLM paper, appendix B). The ceiling: the median rate of an
8192^3 bf16 matrix product measured in the same process (``bench/common.py``). Prints a table and writes
``--json``. ``--budget-s`` (420) skips the phases that would start after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import matmul_tflops, write_json_file  # noqa: E402

TASKS = "rte,mrpc,stsb,cola"
CASES = ("bert-base-256", "hf-reference", "minilm-main", "bert-base-32")
TINY = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
TARGETS = {"mfu_256": 0.35, "vs_reference_256": 0.8, "tokens_per_s_32": 93_000, "vs_plain_32": 0.95,
           "main_job_seconds": 30.0}


# ----------------------------------------------------------------------------------------------- helpers


class Budget:
    """Seconds left of ``--budget-s``; phases that would start after it are skipped."""

    def __init__(self, seconds: float):
        self.start, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def non_embedding_parameters(model) -> int:
    """Parameters outside the embedding tables (word, position, segment): the 6N of the FLOP count."""
    return sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)


def model_flops(n_params: int, layers: int, hidden: int, lengths: list[int]) -> float:
    """6 N T + 12 L h sum(s^2) for examples of real lengths ``lengths`` (see the module docstring)."""
    return 6.0 * n_params * sum(lengths) + 12.0 * layers * hidden * sum(s * s for s in lengths)


def save_encoder(directory: Path, tokenizer_dir: str, tiny: bool) -> str:
    """A randomly initialised BERT (BERT-base geometry, or 2 x 32 with ``tiny``) and the tokenizer, saved."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mtdnn.modeling.model import resolve_encoder

    torch.manual_seed(0)
    BertModel(BertConfig(**(TINY if tiny else {}))).save_pretrained(directory)
    AutoTokenizer.from_pretrained(resolve_encoder(tokenizer_dir)).save_pretrained(directory)
    return str(directory)


class StepTimes:
    """Per-step end markers without synchronising: CUDA events on a GPU, ``perf_counter`` on a CPU."""

    def __init__(self, torch, device):
        self.torch, self.device, self.marks = torch, device, []

    def mark(self) -> None:
        if self.device.type == "cuda":
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self, first: int, last: int) -> float:
        """From the end of step ``first`` to the end of step ``last`` (0-based); synchronises once."""
        if self.device.type == "cuda":
            self.marks[last].synchronize()
            return self.marks[first].elapsed_time(self.marks[last]) / 1e3
        return self.marks[last] - self.marks[first]


def rates(times: StepTimes, lengths: list[list[int]], warmup: int, flops_of) -> dict:
    """Real tokens/s and model FLOP/s of steps ``warmup+1 ..`` (timed from the end of step ``warmup``)."""
    last = len(times.marks) - 1
    if last <= warmup:
        return {"error": f"only {last + 1} steps for {warmup} warm-up steps"}
    seconds = times.seconds(warmup, last)
    timed = [s for step in lengths[warmup + 1:last + 1] for s in step]
    return {"timed_steps": last - warmup, "seconds": seconds, "real_tokens": sum(timed),
            "tokens_per_s": sum(timed) / seconds, "model_flops_per_s": flops_of(timed) / seconds}


# ----------------------------------------------------------------------------------------------- one case


def bert_case(args, batch_size: int, encoder_dir: str, budget: Budget) -> dict:
    """Lightning epoch, plain loop over the same batches, profiled Lightning steps (see the module docstring)."""
    import pytorch_lightning as pl
    import torch

    from mtdnn.modeling.model import load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule, parameter_groups
    from mtdnn.training.speed import compile_encoder, mark_shapes, set_sdpa_backend

    device = torch.device(args.device)
    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), TASKS.split(","), str(defs))
    tokenizer = load_tokenizer(encoder_dir)
    datamodule = MultiTaskDataModule(tasks, Path(args.data_dir), tokenizer, batch_size=batch_size, seed=42,
                                     limit_train_examples=args.limit_train_examples, pad_to_multiple_of=8,
                                     length_buckets=args.length_buckets)
    datamodule.prepare_data()
    datamodule.setup("fit")
    batches = list(datamodule.train_dataloader())  # the epoch-0 plan, which the Lightning epoch also trains on
    if args.max_steps:
        batches = batches[:args.max_steps]
    lengths = [b.attention_mask.sum(1).tolist() for b in batches]
    pl.seed_everything(42, verbose=False)
    module = MultiTaskModule(encoder_dir, {n: t.to_plain() for n, t in tasks.items()}, dev_tasks=[])
    config = module.model.encoder.config
    n_params = non_embedding_parameters(module.model)
    flops_of = lambda ls: model_flops(n_params, config.num_hidden_layers, config.hidden_size, ls)  # noqa: E731
    set_sdpa_backend(args.sdpa_backend)
    if args.compile != "none":
        compile_encoder(module.model.encoder, args.compile, args.length_buckets, args.cuda_graphs)
        datamodule.mark_shapes = "buckets" if args.length_buckets else "dynamic"
    # The autocast of Lightning's bf16-mixed plugin, so that the plain loop runs (and reuses) the same graphs.
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False,
                              enabled=args.precision == "bf16-mixed")
    result = {"batch_size": batch_size, "steps": len(batches), "non_embedding_parameters": n_params,
              "padding_share": 1 - sum(map(sum, lengths)) / sum(b.attention_mask.numel() for b in batches),
              "distinct_shapes": len({tuple(b.input_ids.shape) for b in batches})}

    def tensors(batch, change):
        """The batch (a :class:`~mtdnn.tasks.batch.Batch`) with ``change`` applied to its top-level tensors."""
        return dataclasses.replace(batch, **{f.name: change(getattr(batch, f.name)) for f in dataclasses.fields(batch)
                                             if isinstance(getattr(batch, f.name), torch.Tensor)})

    def to_device(batch):
        moved = tensors(batch, lambda v: v.to(device, non_blocking=True))
        return mark_shapes(moved, datamodule.mark_shapes) if datamodule.mark_shapes else moved

    pinned = [tensors(b, lambda v: v.pin_memory()) if device.type == "cuda" else b for b in batches]

    # Compilation (and CUDA-graph recording) of every distinct shape, outside the timed runs.
    module.to(device).train()
    start = time.perf_counter()
    if args.compile != "none":
        seen = {}
        for b in pinned:
            seen.setdefault((b.task, tuple(b.input_ids.shape)), b)
        for b in seen.values():
            for _ in range(3 if args.cuda_graphs else 1):
                moved = to_device(b)
                with autocast:
                    loss = module.task_loss(moved, module(moved))
                loss.backward()
        module.zero_grad(set_to_none=True)
        sync(torch, device)
    result["compile_seconds"] = time.perf_counter() - start

    # (1) The Lightning Trainer, as mtdnn.train builds it.
    if budget.left() > 0:
        times = StepTimes(torch, device)

        class Mark(pl.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                times.mark()

        trainer = pl.Trainer(accelerator=args.accelerator, devices=1, precision=args.precision, max_epochs=1,
                             gradient_clip_val=1.0, limit_train_batches=len(batches), limit_val_batches=0,
                             num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                             callbacks=[Mark()], default_root_dir=tempfile.mkdtemp(prefix="bench-pl-"))
        trainer.fit(module, datamodule=datamodule)
        result["lightning"] = rates(times, lengths, args.warmup_steps, flops_of)
        result["lightning"]["fused_adamw"] = bool(trainer.optimizers[0].defaults.get("fused"))

    # (2) A plain loop over the same batches through the same module.
    if budget.left() > 0:
        module.to(device).train()
        optimizer = torch.optim.AdamW(parameter_groups(module.model, 0.01), lr=5e-5,
                                      fused=True)
        params = [p for p in module.parameters() if p.requires_grad]
        times = StepTimes(torch, device)
        for b in pinned:
            moved = to_device(b)
            with autocast:
                loss = module.task_loss(moved, module(moved))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.mark()
        result["plain_loop"] = rates(times, lengths, args.warmup_steps, flops_of)

    # (3) Profile of 15 Lightning steps: the GPU-busy share and the top kernels (on a CPU: the top operators).
    if budget.left() > 0:
        result["profile"] = profile_lightning(args, module, datamodule, min(15, len(batches)))
    return result


def profile_lightning(args, module, datamodule, steps: int) -> dict:
    import pytorch_lightning as pl
    from torch.profiler import ProfilerActivity, profile

    trainer = pl.Trainer(accelerator=args.accelerator, devices=1, precision=args.precision, max_epochs=1,
                         gradient_clip_val=1.0, limit_train_batches=steps, limit_val_batches=0, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False,
                         default_root_dir=tempfile.mkdtemp(prefix="bench-prof-"))
    gpu = args.accelerator == "gpu"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])) as prof:
        trainer.fit(module, datamodule=datamodule)
    kernels = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                     if e.device_type.name == "CUDA" and e.time_range.end > e.time_range.start)
    busy, cursor = 0.0, None
    for begin, end in kernels:  # the union of kernel intervals
        if cursor is None or begin > cursor:
            busy, cursor = busy + end - begin, end
        elif end > cursor:
            busy, cursor = busy + end - cursor, end
    span = kernels[-1][1] - kernels[0][0] if kernels else 0
    self_time = (lambda e: e.self_device_time_total) if gpu else (lambda e: e.self_cpu_time_total)  # noqa: E731
    top = sorted(prof.key_averages(), key=lambda e: -self_time(e))[:8]
    return {"steps": steps, "gpu_busy_share": busy / span if span else None,
            "kernel_ms_per_step": busy / 1e3 / steps if gpu else None,
            "top": [{"name": e.key[:80], "self_ms_per_step": self_time(e) / 1e3 / steps,
                     "calls_per_step": e.count / steps} for e in top]}


def hf_reference(args, budget: Budget) -> dict:
    """A fixed-shape Hugging Face BERT-base step: batch x 128 real tokens (see the module docstring)."""
    import torch
    from transformers import BertConfig, BertModel

    device = torch.device(args.device)
    rows, seq = (8, 32) if args.tiny else (256, 128)
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(**(TINY if args.tiny else {}))).to(device).train()
    head = torch.nn.Linear(encoder.config.hidden_size, 2).to(device)
    if args.compile != "none":
        encoder.compile(backend=args.compile)
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=5e-5, fused=True)
    ids = torch.randint(1000, encoder.config.vocab_size, (rows, seq), device=device)
    mask, labels = torch.ones_like(ids), torch.randint(0, 2, (rows,), device=device)
    times = StepTimes(torch, device)
    start = time.perf_counter()
    steps = args.warmup_steps + (5 if args.tiny else 20)
    for step in range(steps):
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False,
                            enabled=args.precision == "bf16-mixed"):
            pooled = encoder(input_ids=ids, attention_mask=mask).pooler_output
            loss = torch.nn.functional.cross_entropy(head(pooled).float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.mark()
        if step == 0:
            sync(torch, device)
            first = time.perf_counter() - start
    config = encoder.config
    n_params = non_embedding_parameters(encoder) + sum(p.numel() for p in head.parameters())
    result = rates(times, [[seq] * rows] * steps, args.warmup_steps,
                   lambda ls: model_flops(n_params, config.num_hidden_layers, config.hidden_size, ls))
    return {"batch_size": rows, "seq_len": seq, "first_step_seconds": first, **result}


def main_job(args, budget: Budget, encoder: str) -> dict:
    """``python -m mtdnn.train``'s code path in process (the pipeline's plan and execute of a TrainConfig, as
    :func:`mtdnn.training.trainer.fit` runs them), with a callback that times the optimizer steps."""
    import pytorch_lightning as pl
    import torch

    from mtdnn.errors import RunStopped
    from mtdnn.training import pipeline
    from mtdnn.training.config import TrainConfig

    device = torch.device(args.device)
    marks: dict[str, float] = {}

    class Times(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            marks.setdefault("first_step_start", time.perf_counter())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if "first_step_end" not in marks:
                sync(torch, device)
                marks["first_step_end"] = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            sync(torch, device)
            marks["last_step_end"] = time.perf_counter()

    run_dir = Path(tempfile.mkdtemp(prefix="bench-main-")) / "run"
    settings = {"task_defs": str(ROOT / "task_defs" / "glue.yaml"), "tasks": TASKS.split(","),
                "data_dir": args.data_dir, "encoder": encoder, "accelerator": args.accelerator, "devices": 1,
                "precision": args.precision, "output_dir": str(run_dir), "sdpa_backend": args.sdpa_backend,
                "pad_to_multiple_of": 8}
    if args.compile != "none":
        settings.update(compile=args.compile, length_buckets=args.length_buckets or None,
                        cuda_graphs=bool(args.cuda_graphs))
    if args.tiny:
        settings.update(limit_train_examples=16, max_epochs=1)
    start = time.perf_counter()
    try:
        pipeline.execute(pipeline.plan(TrainConfig(**settings)), callbacks=[Times()])
        code = 0
    except RunStopped as err:
        code = err.exit_code
    wall = time.perf_counter() - start
    metrics = json.loads((run_dir / "metrics.json").read_text()) if code == 0 else None
    seeds = [json.loads(p.read_text())["best"] for p in sorted((ROOT / "bench" / "results").glob(
        "glue-4task-seed4*-metrics.json"))]
    result = {"exit_code": code, "config": settings, "wall_seconds": wall,
              "seconds_before_first_step": marks.get("first_step_start", start) - start,
              "first_step_seconds": marks.get("first_step_end", 0) - marks.get("first_step_start", 0),
              "first_to_last_step_seconds": marks.get("last_step_end", 0) - marks.get("first_step_end", 0)}
    if metrics:
        best = metrics["best"]
        result["best"] = {"epoch": best["epoch"], "average": best["average"],
                          "tasks": {t: v for t, v in best["tasks"].items()}}
        if seeds:
            low, high = min(s["average"] for s in seeds), max(s["average"] for s in seeds)
            result["cpu_seed_average_range"] = [low, high]
            result["within_cpu_seed_range"] = low <= best["average"] <= high
    return result


# ----------------------------------------------------------------------------------------------- report


def table(results: dict) -> str:
    matmul = results.get("matmul_tflops_per_s")
    ceiling = matmul * 1e12 if matmul else None
    lines = ["| case | batch | Lightning real tok/s | plain loop tok/s | Lightning / plain | Lightning MFU | "
             "plain MFU | GPU busy | compile s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(r, key, fmt):
        return format(r[key], fmt) if r and key in r and r[key] is not None else "-"

    for case in ("bert-base-256", "bert-base-32"):
        r = results.get(case)
        if not r or "error" in r:
            continue
        pl_, plain = r.get("lightning", {}), r.get("plain_loop", {})
        ratio = (pl_["tokens_per_s"] / plain["tokens_per_s"]) if "tokens_per_s" in pl_ and "tokens_per_s" in plain \
            else None
        mfu = lambda x: f"{x['model_flops_per_s'] / ceiling:.1%}" if ceiling and "model_flops_per_s" in x else "-"  # noqa: E731
        lines.append(f"| {case} | {r['batch_size']} | {cell(pl_, 'tokens_per_s', ',.0f')} | "
                     f"{cell(plain, 'tokens_per_s', ',.0f')} | {f'{ratio:.2f}x' if ratio else '-'} | {mfu(pl_)} | "
                     f"{mfu(plain)} | {cell(r.get('profile'), 'gpu_busy_share', '.0%')} | "
                     f"{cell(r, 'compile_seconds', '.0f')} |")
    for case in ("bert-base-256", "bert-base-32"):
        prof = (results.get(case) or {}).get("profile")
        if prof:
            top = "; ".join(f"{t['name'][:40]} {t['self_ms_per_step']:.2f} ms x{t['calls_per_step']:.0f}"
                            for t in prof["top"][:5])
            busy = f"GPU busy {prof['gpu_busy_share']:.0%}, " if prof["gpu_busy_share"] is not None else ""
            lines.append(f"\nprofile {case} ({prof['steps']} Lightning steps): {busy}top per step: {top}")
    ref = results.get("hf-reference")
    if ref and "tokens_per_s" in ref:
        mfu = f"{ref['model_flops_per_s'] / ceiling:.1%}" if ceiling else "-"
        lines.append(f"| hf-reference ({ref['batch_size']}x{ref['seq_len']}) | {ref['batch_size']} | - | "
                     f"{ref['tokens_per_s']:,.0f} | - | - | {mfu} | - | {ref['first_step_seconds']:.0f} |")
    job = results.get("minilm-main")
    if job and "error" in job:
        lines.append(f"\nmain job: failed ({job['error']})")
    elif job:
        best = job.get("best") or {}
        lines.append(f"\nmain job: exit {job['exit_code']}, {job['first_to_last_step_seconds']:.1f} s first to last "
                     f"optimizer step (target <= {TARGETS['main_job_seconds']:.0f}), "
                     f"{job['seconds_before_first_step']:.1f} s before the first step, first step "
                     f"{job['first_step_seconds']:.1f} s, best average {best.get('average', float('nan')):.3f} "
                     f"(CPU seeds {job.get('cpu_seed_average_range')})")
    if matmul:
        lines.append(f"bf16 matmul {results['matmul_size']}^3: {matmul:.3g} TFLOP/s")
    return "\n".join(lines)


def check_targets(results: dict) -> dict:
    """The issue's targets, where measured (None where a number is missing)."""
    ceiling = (results.get("matmul_tflops_per_s") or 0) * 1e12
    b256, b32 = results.get("bert-base-256", {}), results.get("bert-base-32", {})
    ref, job = results.get("hf-reference", {}), results.get("minilm-main", {})
    pl256, pl32, plain32 = b256.get("lightning", {}), b32.get("lightning", {}), b32.get("plain_loop", {})
    get = lambda r, k: r.get(k) if isinstance(r, dict) else None  # noqa: E731
    out = {}
    if ceiling and get(pl256, "model_flops_per_s"):
        out["lightning_256_mfu"] = pl256["model_flops_per_s"] / ceiling >= TARGETS["mfu_256"]
        if get(ref, "model_flops_per_s"):
            out["lightning_256_vs_reference"] = (pl256["model_flops_per_s"] / ref["model_flops_per_s"]
                                                 >= TARGETS["vs_reference_256"])
    if get(pl32, "tokens_per_s"):
        out["lightning_32_tokens_per_s"] = pl32["tokens_per_s"] >= TARGETS["tokens_per_s_32"]
        if get(plain32, "tokens_per_s"):
            out["lightning_32_vs_plain"] = pl32["tokens_per_s"] / plain32["tokens_per_s"] >= TARGETS["vs_plain_32"]
    if job.get("exit_code") == 0:
        out["main_job_seconds"] = job["first_to_last_step_seconds"] <= TARGETS["main_job_seconds"]
        out["main_job_scores"] = job.get("within_cpu_seed_range")
    return out


def build_parser() -> argparse.ArgumentParser:
    from mtdnn.training.speed import SDPA_BACKENDS, parse_buckets

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, or cpu (with --tiny: a check of the code)")
    p.add_argument("--tiny", action="store_true",
                   help="2-layer hidden-32 models (the main job's too), batches 8 and 4, 24 rows a task")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--tokenizer", default="packaged-minilm", help="the uncased BERT vocabulary's tokenizer (a path)")
    p.add_argument("--minilm", default="packaged-minilm", help="the main job's encoder (a path on the GPU machine)")
    p.add_argument("--precision", default=None, help="bf16-mixed on a GPU, 32-true with --tiny on a CPU")
    p.add_argument("--compile", default=None, help="torch.compile backend or none (default: inductor on a GPU, "
                                                   "none on a CPU)")
    p.add_argument("--length-buckets", type=parse_buckets, default=None,
                   help="pad to these lengths (default none: lengths padded to a multiple of 8, batch and "
                        "sequence dimensions marked dynamic: one compiled graph)")
    p.add_argument("--cuda-graphs", action="store_true", help="CUDA graphs per bucket (reduce-overhead)")
    p.add_argument("--sdpa-backend", choices=SDPA_BACKENDS, default="efficient")
    p.add_argument("--warmup-steps", type=int, default=None, help="steps excluded from timing (10; tiny 2)")
    p.add_argument("--max-steps", type=int, default=None, help="cut each BERT-base epoch to N steps")
    p.add_argument("--limit-train-examples", type=int, default=None, help="rows per task (default all; tiny 24)")
    p.add_argument("--matmul-size", type=int, default=None, help="n of the n^3 bf16 matmul (8192; tiny 256)")
    p.add_argument("--budget-s", type=float, default=420, help="skip phases that would start after this")
    p.add_argument("--json", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from mtdnn.tasks.data import resolve_data_dir

    os.environ.setdefault("MTDNN_CACHE_DIR", tempfile.mkdtemp(prefix="bench-cache-"))
    args.data_dir = str(resolve_data_dir(args.data_dir))
    gpu = args.device.startswith("cuda")
    args.accelerator = "gpu" if gpu else "cpu"
    args.precision = args.precision or ("bf16-mixed" if gpu else "32-true")
    args.compile = args.compile or ("inductor" if gpu else "none")
    args.warmup_steps = args.warmup_steps if args.warmup_steps is not None else (2 if args.tiny else 10)
    args.limit_train_examples = args.limit_train_examples or (24 if args.tiny else None)
    size = args.matmul_size or (256 if args.tiny else 8192)
    cases = [c.strip() for c in args.cases.split(",")]
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(sorted(unknown))} (choose from {', '.join(CASES)})")
    budget = Budget(args.budget_s)
    results: dict = {"benchmark": "trainer_speed", "device": args.device, "tiny": args.tiny,
                     "precision": args.precision, "compile": args.compile, "length_buckets": args.length_buckets,
                     "cuda_graphs": args.cuda_graphs, "sdpa_backend": args.sdpa_backend,
                     "warmup_steps": args.warmup_steps, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "python": platform.python_version(), "torch": torch.__version__,
                     "gpu": torch.cuda.get_device_name(0) if gpu else None}
    import pytorch_lightning
    import transformers

    results["versions"] = {"transformers": transformers.__version__, "pytorch_lightning": pytorch_lightning.__version__}
    encoder_dir = None
    for case in cases:
        if budget.left() <= 0:
            results[case] = {"skipped": f"--budget-s {args.budget_s} spent"}
            continue
        started = time.perf_counter()
        print(f"== {case} ({budget.left():.0f} s of the budget left)", file=sys.stderr, flush=True)
        try:
            if case.startswith("bert-base"):
                if encoder_dir is None:
                    encoder_dir = save_encoder(Path(tempfile.mkdtemp(prefix="bench-bert-")), args.tokenizer, args.tiny)
                batch = int(case.rsplit("-", 1)[1]) // (32 if args.tiny else 1)
                results[case] = bert_case(args, max(batch, 4), encoder_dir, budget)
            elif case == "hf-reference":
                results[case] = hf_reference(args, budget)
            else:
                if args.tiny and encoder_dir is None:
                    encoder_dir = save_encoder(Path(tempfile.mkdtemp(prefix="bench-bert-")), args.tokenizer, True)
                results[case] = main_job(args, budget, encoder_dir if args.tiny else args.minilm)
        except Exception as err:  # noqa: BLE001 - one failed case must not lose the others' numbers
            results[case] = {"error": f"{type(err).__name__}: {err}"}
            print(f"{case} failed: {err}", file=sys.stderr, flush=True)
        results[case]["case_seconds"] = time.perf_counter() - started
    device = torch.device(args.device)
    results["matmul_size"] = size
    results["matmul_tflops_per_s"] = matmul_tflops(torch, device, size)
    results["targets"] = TARGETS
    results["targets_met"] = check_targets(results) if not args.tiny else None
    results["wall_seconds"] = time.perf_counter() - budget.start
    print(table(results))
    if args.json:
        write_json_file(args.json, results)
        print(f"wrote {args.json}")
    return 0 if all("error" not in results[c] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
