"""Training throughput: mtdnn's own loader and module against a plain transformers ``Trainer`` fine-tune.

CPU mode (the default) compares four set-ups on the same examples::

    .venv/bin/python bench/throughput.py --data-dir ../shared/data --tasks rte,mrpc,stsb,cola \\
        --limit-train-examples 256 --json bench-throughput.json

- ``mtdnn``: what ``python -m mtdnn.train`` builds: :class:`~mtdnn.training.lightning.MultiTaskDataModule` (cached
  tokenization, MT-DNN Algorithm 1 schedule, single-task length-grouped batches, dynamic padding) and
  :class:`~mtdnn.training.lightning.MultiTaskModule` under a Lightning ``Trainer``;
- ``hf_max_length``: a plain ``transformers`` ``Trainer`` fine-tune with run_glue's defaults: every example
  padded to 128 tokens at tokenization, ``default_data_collator``, random order;
- ``hf_dynamic``: the same ``Trainer`` with ``DataCollatorWithPadding`` (each batch padded to its longest row);
- ``hf_grouped``: that with the ``Trainer``'s length grouping (reported only).

All four: the first ``--limit-train-examples`` rows of each task's train split, one epoch, global batch 32,
fp32 on the CPU, max length 128, pairs tokenized as pairs, AdamW (fused), gradient clipping 1.0. The ``Trainer``
set-ups fine-tune one 2-way classification head on the union of the tasks (STS-B scores binarised at 2.5:
only the compute is measured). Each set-up and run is its own subprocess, so each peak RSS is its own; runs are
interleaved across set-ups so that a change of machine load hits all set-ups alike.

A step's time runs from the end of the previous optimizer step to the end of this one, so it includes fetching
and collating the batch, forward, backward, clipping, the optimizer and the framework's own per-step work. The
first ``--warmup-steps`` (3) steps are excluded. ``tokens_per_s`` counts real tokens only
(``attention_mask.sum()`` of exactly the timed steps' batches); ``peak_rss_mib`` is the process's peak resident
set (``VmHWM``). Each number is the median over ``--runs`` (3) runs. Prints a Markdown table and writes
``--json`` with one object per set-up under ``mtdnn``, ``hf_max_length``, ``hf_dynamic``, ``hf_grouped``.
Targets: ``mtdnn`` at least 3x the examples per second of ``hf_max_length`` and 1.2x of ``hf_dynamic``.

GPU mode (``--device cuda``) measures model FLOP/s of a training step of BERT-base geometry (random init) on
the four tasks' real length distribution: see :func:`gpu_benchmark` and ``bench/README.md``. It imports only
torch, transformers and :mod:`mtdnn.tasks.schedule` (pure torch), and reads the token ids that
``--export-tokens FILE`` wrote here (the GPU machine has neither ``datasets`` nor the data).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETUPS = ("mtdnn", "hf_max_length", "hf_dynamic", "hf_grouped")
DEFAULT_TASKS = "rte,mrpc,stsb,cola"
RESULT_PREFIX = "THROUGHPUT_RESULT "
CPU_TARGETS = {"hf_max_length": 3.0, "hf_dynamic": 1.2}  # minimum speed-up of mtdnn (examples/s) over these
GPU_TARGET = 0.45  # model FLOP/s on real tokens over the measured bf16 matmul rate

# BERT-base (Devlin et al. 2019) and a tiny stand-in that exercises the GPU code path on a CPU.
BERT_BASE = {"num_hidden_layers": 12, "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
             "vocab_size": 30522}
SMOKE_GEOMETRY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 2,
                  "vocab_size": 30522}


def peak_rss_mib() -> float:
    """This process's peak resident set in MiB: ``VmHWM`` (Linux), else ``ru_maxrss``.

    ``VmHWM`` belongs to the process's own address space; ``ru_maxrss`` can carry over the peak of the forked
    copy of the parent that existed before ``exec``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ------------------------------------------------------------------------------------------------ step timing


class StepClock:
    """What each optimizer step trained on and when it began and ended (``time.perf_counter``)."""

    def __init__(self):
        self.begins: list[float] = []
        self.ends: list[float] = []
        self.examples: list[int] = []
        self.real_tokens: list[int] = []
        self.padded_tokens: list[int] = []

    def add_batch(self, attention_mask) -> None:
        """Count one batch: rows, real tokens (mask ones) and padded tokens (the mask's size)."""
        self.examples.append(int(attention_mask.shape[0]))
        self.real_tokens.append(int(attention_mask.sum()))
        self.padded_tokens.append(int(attention_mask.numel()))

    def summary(self, warmup: int) -> dict:
        """Throughput of the steps after the first ``warmup`` ones.

        The timed span runs from the end of step ``warmup`` to the end of the last step, so it holds everything
        the training loop does between steps (loading and collating batches included).

        Raises:
            SystemExit: too few steps, or batches counted do not match the steps taken.
        """
        steps = len(self.ends)
        if steps <= max(warmup, 1):
            raise SystemExit(f"only {steps} optimizer steps: need more than the {warmup} warm-up steps "
                             "(raise --limit-train-examples)")
        if len(self.examples) != steps or len(self.begins) != steps:
            raise SystemExit(f"counted {len(self.examples)} batches and {len(self.begins)} step starts for "
                             f"{steps} optimizer steps")
        start = self.ends[warmup - 1] if warmup > 0 else self.begins[0]
        seconds = self.ends[-1] - start
        timed = slice(warmup, steps)
        examples, real, padded = (sum(x[timed]) for x in (self.examples, self.real_tokens, self.padded_tokens))
        return {"steps": steps, "timed_steps": steps - warmup, "seconds": seconds,
                "step_seconds": sum(e - b for b, e in zip(self.begins[timed], self.ends[timed])),
                "examples": examples, "real_tokens": real, "padded_tokens": padded,
                "examples_per_s": examples / seconds, "tokens_per_s": real / seconds,
                "padded_tokens_per_s": padded / seconds, "padding_share": 1 - real / padded,
                "total_examples": sum(self.examples), "total_real_tokens": sum(self.real_tokens)}


# ------------------------------------------------------------------------------------------------ (a) mtdnn


def run_mtdnn(args: argparse.Namespace) -> dict:
    """One epoch of the toolkit's own training: the pieces ``mtdnn.train`` builds, without the run directory."""
    import pytorch_lightning as pl
    import torch

    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.training.lightning import MultiTaskDataModule, MultiTaskModule
    from mtdnn.modeling.model import load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), args.tasks.split(","), str(defs))
    tokenizer = load_tokenizer(args.encoder)
    pl.seed_everything(args.seed, workers=True, verbose=False)
    module = MultiTaskModule(args.encoder, {n: t.to_plain() for n, t in tasks.items()})
    datamodule = MultiTaskDataModule(tasks, resolve_data_dir(args.data_dir), tokenizer, batch_size=args.batch_size,
                                     seed=args.seed, limit_train_examples=args.limit_train_examples,
                                     max_length=args.max_length)
    datamodule.prepare_data()  # tokenize (or read the cache) before anything is timed
    clock = StepClock()

    class Timing(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            clock.begins.append(time.perf_counter())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            clock.ends.append(time.perf_counter())
            clock.add_batch(batch["attention_mask"])

    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, precision="32-true", gradient_clip_val=1.0,
                         limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                         callbacks=[Timing()], default_root_dir=tempfile.mkdtemp(prefix="bench-mtdnn-"))
    trainer.fit(module, datamodule=datamodule)
    return {**clock.summary(args.warmup_steps), "threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------------------ (b)-(d) Trainer


def hf_dataset(args: argparse.Namespace, tokenizer, pad_to_max_length: bool):
    """The same rows as ``mtdnn`` (first N per task, parsed by :mod:`mtdnn.tasks.data`) as one ``datasets.Dataset``.

    Tokenized as run_glue does: ``tokenizer(text_a, text_b)`` truncated to ``--max-length``, padded to it when
    ``pad_to_max_length``. Labels: the class id, or for regression the score binarised at 2.5.
    """
    import datasets

    from mtdnn.tasks.data import load_split, resolve_data_dir
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), args.tasks.split(","), str(defs))
    data_dir = resolve_data_dir(args.data_dir)
    columns: dict[str, list] = {}
    for task in tasks.values():
        if task.type == "ranking":
            raise SystemExit(f"task '{task.name}': ranking tasks have no plain Trainer counterpart here")
        examples = load_split(task, "train", data_dir).examples[: args.limit_train_examples]
        pairs = [ex.text_b for ex in examples] if len(task.text) > 1 else None
        encoded = tokenizer([ex.text_a for ex in examples], pairs, truncation=True, max_length=args.max_length,
                            padding="max_length" if pad_to_max_length else False)
        labels = [int(ex.label >= 2.5) if task.type == "regression" else int(ex.label) for ex in examples]
        for key, values in [*encoded.items(), ("label", labels)]:
            columns.setdefault(key, []).extend(values)
    return datasets.Dataset.from_dict(columns)


class CountingCollator:
    """Wraps a collator and counts every batch it builds, in order (batch k is optimizer step k)."""

    def __init__(self, inner, clock: StepClock):
        self.inner, self.clock = inner, clock

    def __call__(self, features):
        batch = self.inner(features)
        self.clock.add_batch(batch["attention_mask"])
        return batch


def run_hf(args: argparse.Namespace, setup: str) -> dict:
    """One epoch of a plain ``transformers`` ``Trainer`` fine-tune (set-ups ``hf_*``)."""
    import dataclasses

    import torch
    from transformers import (AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer,
                              TrainerCallback, TrainingArguments, default_data_collator, set_seed)

    from mtdnn.modeling.model import load_tokenizer, resolve_encoder

    tokenizer = load_tokenizer(args.encoder)
    set_seed(args.seed)
    dataset = hf_dataset(args, tokenizer, pad_to_max_length=setup == "hf_max_length")
    # float32 master weights: transformers 5 otherwise keeps the checkpoint's stored dtype (see mtdnn.model).
    model = AutoModelForSequenceClassification.from_pretrained(resolve_encoder(args.encoder), num_labels=2,
                                                               dtype=torch.float32)
    clock = StepClock()
    collator = CountingCollator(default_data_collator if setup == "hf_max_length"
                                else DataCollatorWithPadding(tokenizer), clock)

    class Timing(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.begins.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            clock.ends.append(time.perf_counter())

    options = dict(output_dir=tempfile.mkdtemp(prefix="bench-hf-"), per_device_train_batch_size=args.batch_size,
                   num_train_epochs=1, learning_rate=5e-5, seed=args.seed, use_cpu=True, report_to="none",
                   save_strategy="no", eval_strategy="no", logging_strategy="no", disable_tqdm=True,
                   dataloader_num_workers=0)
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    if setup == "hf_grouped":  # transformers >= 5.x: train_sampling_strategy; before: group_by_length
        options.update({"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in fields
                       else {"group_by_length": True})
    trainer = Trainer(model=model, args=TrainingArguments(**options), train_dataset=dataset, data_collator=collator,
                      processing_class=tokenizer, callbacks=[Timing()])
    trainer.train()
    return {**clock.summary(args.warmup_steps), "threads": torch.get_num_threads()}


def worker(args: argparse.Namespace) -> int:
    """Run one set-up once and print its result as one JSON line."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = run_mtdnn(args) if args.worker == "mtdnn" else run_hf(args, args.worker)
    result.update(setup=args.worker, peak_rss_mib=peak_rss_mib())
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------ CPU parent


def launch(args: argparse.Namespace, setup: str) -> dict:
    """Run ``setup`` in a fresh interpreter; return its result line."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", setup, "--tasks", args.tasks,
               "--encoder", args.encoder, "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
               "--warmup-steps", str(args.warmup_steps), "--seed", str(args.seed),
               "--limit-train-examples", str(args.limit_train_examples)]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    if args.threads:
        command += ["--threads", str(args.threads)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-6000:])
        raise SystemExit(f"set-up {setup} failed (exit code {done.returncode}): {' '.join(command)}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def median_result(runs: list[dict]) -> dict:
    """Per-number medians over runs; the runs themselves are kept under ``runs``."""
    keys = ("examples_per_s", "tokens_per_s", "peak_rss_mib", "padded_tokens_per_s", "padding_share", "seconds",
            "step_seconds")
    merged = {key: statistics.median(r[key] for r in runs) for key in keys}
    merged.update({k: runs[0][k] for k in ("steps", "timed_steps", "total_examples", "total_real_tokens", "threads")})
    merged["runs"] = runs
    return merged


def markdown_table(results: dict[str, dict]) -> str:
    def speedup(setup: str, base: str) -> str:
        if base not in results:
            return "-"
        return f"{results[setup]['examples_per_s'] / results[base]['examples_per_s']:.2f}x"

    lines = ["| set-up | examples/s | real tokens/s | padding | peak RSS MiB | vs hf_max_length | vs hf_dynamic |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for setup, r in results.items():
        lines.append(f"| {setup} | {r['examples_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['padding_share']:.0%} | "
                     f"{r['peak_rss_mib']:.0f} | {speedup(setup, 'hf_max_length')} | {speedup(setup, 'hf_dynamic')} |")
    return "\n".join(lines)


def cpu_benchmark(args: argparse.Namespace) -> int:
    import importlib.metadata as md

    from mtdnn.training.runs import write_json_atomic

    setups = [s.strip() for s in args.setups.split(",")]
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        raise SystemExit(f"--setups: unknown {', '.join(unknown)} (choose from {', '.join(SETUPS)})")
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {s: [] for s in setups}
    started = time.perf_counter()
    for run in range(args.runs):  # interleaved: run 1 of every set-up, then run 2, ...
        for setup in setups:
            result = launch(args, setup)
            runs[setup].append(result)
            print(f"run {run + 1}/{args.runs} {setup:<14} {result['examples_per_s']:7.1f} examples/s "
                  f"{result['tokens_per_s']:8.0f} real tokens/s  peak RSS {result['peak_rss_mib']:.0f} MiB "
                  f"({result['timed_steps']} timed steps, {result['seconds']:.1f} s)", file=sys.stderr, flush=True)
    results = {s: median_result(r) for s, r in runs.items()}
    totals = {(r["total_examples"], r["total_real_tokens"]) for r in results.values()}
    if len(totals) != 1:
        raise SystemExit(f"the set-ups trained on different examples (examples, real tokens): {sorted(totals)}")

    targets = {}
    if "mtdnn" in results:
        for base, minimum in CPU_TARGETS.items():
            if base in results:
                ratio = results["mtdnn"]["examples_per_s"] / results[base]["examples_per_s"]
                targets[f"mtdnn_vs_{base}"] = {"speedup": ratio, "minimum": minimum, "met": ratio >= minimum}
    n_tasks = len(args.tasks.split(","))
    threads = results[setups[0]]["threads"]
    print(f"\nTraining throughput, {args.encoder}, tasks {args.tasks}, first {args.limit_train_examples} train rows "
          f"per task ({next(iter(totals))[0]} examples), batch {args.batch_size}, fp32, max length {args.max_length}, "
          f"1 epoch, first {args.warmup_steps} steps excluded, median of {args.runs} run(s), {threads} torch "
          f"threads\n")
    print(markdown_table(results))
    for name, t in targets.items():
        print(f"target {name} >= {t['minimum']}x: {t['speedup']:.2f}x, {'met' if t['met'] else 'NOT met'}")
    if args.json:
        versions = {p: md.version(p) for p in ("torch", "transformers", "pytorch-lightning", "datasets", "accelerate")}
        write_json_atomic(args.json, {
            **{s: results[s] for s in setups},
            "benchmark": "throughput", "device": "cpu", "encoder": args.encoder, "tasks": args.tasks.split(","),
            "limit_train_examples": args.limit_train_examples, "examples": next(iter(totals))[0],
            "real_tokens": next(iter(totals))[1],
            "num_tasks": n_tasks, "batch_size": args.batch_size, "max_length": args.max_length, "precision": "fp32",
            "warmup_steps": args.warmup_steps, "runs": args.runs, "threads": threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpu_count": os.cpu_count(),
            "versions": versions, "python": platform.python_version(), "machine": platform.machine(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "wall_seconds": time.perf_counter() - started,
            "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
            "targets": targets, "targets_met": all(t["met"] for t in targets.values()) if targets else None})
        print(f"wrote {args.json}")
    return 0


# ------------------------------------------------------------------------------------------------ GPU mode


def write_json_file(path: str, obj: dict) -> None:
    """Write ``obj`` as JSON through a temporary file and a rename (``mtdnn.runs`` would import Lightning)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def export_tokens(args: argparse.Namespace) -> int:
    """Write the tasks' tokenized train splits (ids and where segment B starts) for the GPU mode.

    The GPU machine has neither ``datasets`` nor the data: this file is what it needs of them. Token ids come from
    the tokenized-split cache, exactly as ``mtdnn.train`` sees them (truncated to ``--max-length``).
    """
    from mtdnn.tasks.data import resolve_data_dir, tokenized_split, tokenizer_fingerprint
    from mtdnn.modeling.model import load_tokenizer
    from mtdnn.training.runs import write_atomic
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), args.tasks.split(","), str(defs))
    tokenizer = load_tokenizer(args.encoder)
    data_dir = resolve_data_dir(args.data_dir)
    out = {"format": "mtdnn-bench-tokens/1", "encoder": args.encoder, "vocab_size": len(tokenizer),
           "pad_token_id": tokenizer.pad_token_id or 0, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
           "max_length": args.max_length, "tasks": {}}
    for name, task in tasks.items():
        split = tokenized_split(task, "train", data_dir, tokenizer, args.max_length)
        types = split.token_type_ids or [[0] * len(ids) for ids in split.input_ids]
        out["tasks"][name] = {"type": task.type, "num_outputs": task.num_outputs, "input_ids": split.input_ids,
                              "segment_b_start": [t.index(1) if 1 in t else len(t) for t in types]}
        lengths = split.lengths
        print(f"{name}: {len(lengths)} examples, mean length {sum(lengths) / len(lengths):.1f}, max {max(lengths)}")
    write_atomic(args.export_tokens, json.dumps(out, separators=(",", ":")))
    print(f"wrote {args.export_tokens}")
    return 0


def model_flops(lengths: list[int], layers: int, hidden: int, ff: int) -> float:
    """Training FLOPs of sequences of these real lengths: per token 6L(4h^2 + 2h*ff) + 12L*h*s.

    Forward and backward (x3) of the 4h^2 attention projections and the 2h*ff feed-forward, 2 FLOPs a
    multiply-add, plus attention scores and weighted values over the sequence's s real tokens; embeddings,
    pooler and heads excluded (Kaplan et al. 2020, with the attention term as in the PaLM paper's appendix B).
    """
    per_token = 6 * layers * (4 * hidden * hidden + 2 * hidden * ff)
    return float(sum(per_token * s + 12 * layers * hidden * s * s for s in lengths))


def matmul_tflops(torch, device, size: int, repeats: int = 20) -> float:
    """Median TFLOP/s of a ``size``-cubed bf16 matrix product on random data (the ceiling for the ratio)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    c = torch.empty(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b, out=c)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b, out=c)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            times.append(time.perf_counter() - t)
    return 2 * size**3 / statistics.median(times) / 1e12


def gpu_benchmark(args: argparse.Namespace) -> int:
    """Model FLOP/s of bf16 training steps of BERT-base geometry on the tasks' real length distribution.

    Data: the token ids of ``--tokens-file`` (see :func:`export_tokens`), scheduled by the toolkit's own
    :class:`~mtdnn.tasks.schedule.MultiTaskBatchSampler` (Algorithm 1, length-grouped single-task batches of
    ``--batch-size`` 256; each task's short last batch is dropped so that every step has the same batch size),
    padded to a multiple of ``--pad-to-multiple-of`` 8. Model: ``BertModel`` with BERT-base geometry, random
    init (no weights can be fetched there), SDPA attention, one pooled-[CLS] head per task as in
    ``task_defs/glue.yaml``, fp32 master weights under ``torch.autocast(bfloat16)``, fused AdamW (lr 5e-5, weight
    decay 0.01, linear warm-up and decay), gradient clipping 1.0, dropout 0.1. The encoder is compiled in place
    (as ``mtdnn.train --compile`` does) with the sequence length marked dynamic; every padded length of the timed
    epochs is run ``--warmup-per-shape`` times first, so compilation stays out of the numbers. Then ``--epochs``
    timed epochs; each number is the median over them. No host-device synchronisation inside an epoch.
    """
    import torch
    from torch import nn
    from transformers import AutoModel, BertConfig, get_linear_schedule_with_warmup

    from mtdnn.tasks.schedule import MultiTaskBatchSampler, TaskSize  # pure torch: no datasets, pydantic or Lightning

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    smoke = args.gpu_mode_smoke
    geometry = SMOKE_GEOMETRY if smoke else BERT_BASE
    batch_size = args.batch_size or (8 if smoke else 256)
    multiple = args.pad_to_multiple_of
    if not args.tokens_file:
        raise SystemExit("GPU mode needs --tokens-file (written here by --export-tokens FILE)")
    data = json.loads(Path(args.tokens_file).read_text(encoding="utf-8"))
    names = [t for t in args.tasks.split(",")]
    missing = [t for t in names if t not in data["tasks"]]
    if missing:
        raise SystemExit(f"{args.tokens_file}: no tokens for {', '.join(missing)} (has {', '.join(data['tasks'])})")
    limit = args.limit_train_examples
    tasks = {n: {**data["tasks"][n], "input_ids": data["tasks"][n]["input_ids"][:limit],
                 "segment_b_start": data["tasks"][n]["segment_b_start"][:limit]} for n in names}
    lengths = {n: [len(ids) for ids in t["input_ids"]] for n, t in tasks.items()}
    torch.manual_seed(args.seed)
    labels = {n: (torch.rand(len(lengths[n])) * 5 if t["type"] == "regression"
                  else torch.randint(0, t["num_outputs"], (len(lengths[n]),))) for n, t in tasks.items()}
    sampler = MultiTaskBatchSampler([TaskSize(lengths[n]) for n in names], batch_size, "proportional", seed=args.seed)

    def make_batch(task_index: int, rows: list[int]) -> dict:
        name = names[task_index]
        seqs, starts = tasks[name]["input_ids"], tasks[name]["segment_b_start"]
        seq_len = -(-max(len(seqs[r]) for r in rows) // multiple) * multiple
        ids = torch.full((len(rows), seq_len), data.get("pad_token_id", 0), dtype=torch.long)
        mask = torch.zeros((len(rows), seq_len), dtype=torch.long)
        types = torch.zeros((len(rows), seq_len), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(seqs[r])] = torch.tensor(seqs[r])
            mask[i, : len(seqs[r])] = 1
            types[i, starts[r]: len(seqs[r])] = 1
        tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels[name][rows]}
        if device.type == "cuda":
            tensors = {k: v.pin_memory() for k, v in tensors.items()}
        return {"task": name, "tensors": tensors, "lengths": [len(seqs[r]) for r in rows], "seq_len": seq_len}

    def epoch_batches(epoch: int) -> tuple[list[dict], int]:
        plan = sampler.plan(epoch)
        full = [make_batch(t, rows) for t, rows in plan if len(rows) == batch_size]
        return full, sum(len(rows) for _, rows in plan if len(rows) < batch_size)

    timed_epochs = [epoch_batches(e) for e in range(1, args.epochs + 1)]
    if not all(batches for batches, _ in timed_epochs):
        raise SystemExit(f"no full batch of {batch_size}: lower --batch-size or raise --limit-train-examples")

    # Model: random-init BERT geometry, a pooled-[CLS] head per task, fp32 master weights.
    config = BertConfig(**geometry, max_position_embeddings=512, type_vocab_size=2, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1)
    try:
        encoder = AutoModel.from_config(config, attn_implementation="sdpa")
    except (TypeError, ValueError, ImportError):
        encoder = AutoModel.from_config(config)
    heads = nn.ModuleDict({n: nn.Linear(config.hidden_size, t["num_outputs"]) for n, t in tasks.items()})
    head_dropout = nn.Dropout(0.1)
    model = nn.ModuleDict({"encoder": encoder, "heads": heads}).to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "LayerNorm" not in n)]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        optimizer = torch.optim.AdamW(groups, lr=5e-5, fused=True)
        fused = True
    except (RuntimeError, ValueError):
        optimizer, fused = torch.optim.AdamW(groups, lr=5e-5), False
    shapes = sorted({b["seq_len"] for batches, _ in timed_epochs for b in batches})
    warmup_steps = len(shapes) * args.warmup_per_shape
    total_steps = warmup_steps + sum(len(batches) for batches, _ in timed_epochs)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(0.1 * total_steps), total_steps)
    params = list(model.parameters())
    cudagraphs = args.compile_mode == "reduce-overhead"
    if args.compile_mode != "none":
        import torch._dynamo

        for knob in ("recompile_limit", "cache_size_limit"):  # room for one graph per padded length if needed
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
        encoder.compile(mode=args.compile_mode)

    def step(batch: dict) -> None:
        t = {k: v.to(device, non_blocking=True) for k, v in batch["tensors"].items()}
        if args.compile_mode != "none" and not args.static_shapes:
            for key in ("input_ids", "attention_mask", "token_type_ids"):
                torch._dynamo.maybe_mark_dynamic(t[key], 1)
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = encoder(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                          token_type_ids=t["token_type_ids"])
            outputs = heads[batch["task"]](head_dropout(out.pooler_output)).float()
        if tasks[batch["task"]]["type"] == "regression":
            loss = nn.functional.mse_loss(outputs.squeeze(-1), t["labels"].float())
        else:
            loss = nn.functional.cross_entropy(outputs, t["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    # Warm-up: compile, and (with CUDA graphs) record, every padded length the timed epochs use.
    started = time.perf_counter()
    for seq_len in shapes:
        example = next(b for batches, _ in timed_epochs for b in batches if b["seq_len"] == seq_len)
        for _ in range(args.warmup_per_shape):
            step(example)
    synchronize()
    warmup_seconds = time.perf_counter() - started
    print(f"warm-up: {len(shapes)} padded lengths {shapes} x {args.warmup_per_shape} steps in {warmup_seconds:.1f} s",
          file=sys.stderr, flush=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    L, h, ff = geometry["num_hidden_layers"], geometry["hidden_size"], geometry["intermediate_size"]
    epochs = []
    for number, (batches, dropped) in enumerate(timed_epochs, start=1):
        synchronize()
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        synchronize()
        seconds = time.perf_counter() - start
        real = [s for b in batches for s in b["lengths"]]
        padded_tokens = sum(b["seq_len"] * len(b["lengths"]) for b in batches)
        flops = model_flops(real, L, h, ff)
        padded_flops = sum(model_flops([b["seq_len"]] * len(b["lengths"]), L, h, ff) for b in batches)
        epochs.append({"epoch": number, "steps": len(batches), "seconds": seconds, "examples": len(real),
                       "dropped_examples": dropped, "real_tokens": sum(real), "padded_tokens": padded_tokens,
                       "examples_per_s": len(real) / seconds, "tokens_per_s": sum(real) / seconds,
                       "padded_tokens_per_s": padded_tokens / seconds, "model_flops_per_s": flops / seconds,
                       "padded_flops_per_s": padded_flops / seconds, "padding_share": 1 - sum(real) / padded_tokens})
        print(f"epoch {number}: {len(batches)} steps in {seconds:.2f} s, {sum(real) / seconds:,.0f} real tokens/s, "
              f"{flops / seconds / 1e12:.1f} model TFLOP/s", file=sys.stderr, flush=True)
    median = {k: statistics.median(e[k] for e in epochs) for k in
              ("examples_per_s", "tokens_per_s", "padded_tokens_per_s", "model_flops_per_s", "padded_flops_per_s",
               "padding_share", "seconds")}
    matmul = matmul_tflops(torch, device, args.matmul_size)
    ratio = median["model_flops_per_s"] / 1e12 / matmul
    mean_len = statistics.mean(s for b in timed_epochs[0][0] for s in b["lengths"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"\nGPU mode{' SMOKE (tiny model on ' + device.type + ', numbers meaningless)' if smoke else ''}: {name}, "
          f"{'BERT-base' if not smoke else 'tiny'} geometry {geometry}, random init, bf16 autocast, batch {batch_size}, "
          f"pad to multiple of {multiple}, compile {args.compile_mode}, tasks {','.join(names)} "
          f"(mean real length {mean_len:.1f}), median of {len(epochs)} timed epochs\n")
    print("| examples/s | real tokens/s | padded tokens/s | padding | model TFLOP/s (real) | bf16 matmul TFLOP/s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {median['examples_per_s']:,.0f} | {median['tokens_per_s']:,.0f} | {median['padded_tokens_per_s']:,.0f} | "
          f"{median['padding_share']:.0%} | {median['model_flops_per_s'] / 1e12:.1f} | {matmul:.1f} | {ratio:.1%} |")
    met = None if smoke or device.type != "cuda" else ratio >= GPU_TARGET
    print(f"target (model FLOP/s on real tokens >= {GPU_TARGET:.0%} of the bf16 matmul rate): "
          + ("not evaluated (smoke)" if met is None else "met" if met else "NOT met"))
    if args.json:
        import transformers

        write_json_file(args.json, {
            "benchmark": "throughput-gpu", "smoke": smoke, "device": name, "geometry": geometry,
            "tasks": names, "batch_size": batch_size, "pad_to_multiple_of": multiple, "precision": "bf16 autocast, "
            "fp32 master weights", "optimizer": f"AdamW{' (fused)' if fused else ''}", "compile_mode": args.compile_mode,
            "static_shapes": args.static_shapes, "padded_lengths": shapes, "warmup_per_shape": args.warmup_per_shape,
            "warmup_seconds": warmup_seconds, "mean_real_length": mean_len,
            "flops_per_real_token": "6L(4h^2 + 2h*ff) + 12L*h*s, s the real length, embeddings excluded",
            **median, "model_tflops_per_s": median["model_flops_per_s"] / 1e12, "matmul_tflops_per_s": matmul,
            "matmul_size": args.matmul_size, "ratio_to_matmul": ratio, "target": GPU_TARGET, "target_met": met,
            "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
            "epochs": epochs, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        print(f"wrote {args.json}")
    return 0


# ------------------------------------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated tasks of task_defs/glue.yaml")
    p.add_argument("--limit-train-examples", type=int, default=None, metavar="N",
                   help="the first N train rows of each task (default: 256 on the CPU, all in GPU mode)")
    p.add_argument("--json", default=None, help="write the results to this JSON file (atomically)")
    p.add_argument("--encoder", default="packaged-minilm", help="CPU mode: Hugging Face encoder name or path")
    p.add_argument("--batch-size", type=int, default=None, help="32 on the CPU, 256 in GPU mode (8 in its smoke)")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--runs", type=int, default=3, help="CPU mode: runs per set-up (the median is reported)")
    p.add_argument("--setups", default=",".join(SETUPS), help="CPU mode: which set-ups to run")
    p.add_argument("--warmup-steps", type=int, default=3, help="CPU mode: optimizer steps excluded from timing")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--worker", choices=SETUPS, default=None, help=argparse.SUPPRESS)
    g = p.add_argument_group("GPU mode")
    g.add_argument("--device", default="cpu", help="cpu (the four-set-up comparison) or cuda (GPU mode)")
    g.add_argument("--gpu-mode-smoke", action="store_true",
                   help="run the GPU mode's code on --device (cpu too) with a 2-layer, hidden-64 model")
    g.add_argument("--export-tokens", "--export-lengths", dest="export_tokens", default=None, metavar="FILE",
                   help="write the tasks' tokenized train splits for the GPU mode to FILE, then exit")
    g.add_argument("--tokens-file", default=None, help="GPU mode: the file written by --export-tokens")
    g.add_argument("--epochs", type=int, default=3, help="GPU mode: timed epochs (the median is reported)")
    g.add_argument("--pad-to-multiple-of", type=int, default=8)
    g.add_argument("--compile-mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune", "none"],
                   help="GPU mode: torch.compile mode of the encoder (none: eager)")
    g.add_argument("--static-shapes", action="store_true",
                   help="GPU mode: do not mark the sequence length dynamic (one compiled graph per padded length)")
    g.add_argument("--warmup-per-shape", type=int, default=3, help="GPU mode: untimed steps per padded length")
    g.add_argument("--matmul-size", type=int, default=None, help="GPU mode: n of the n^3 bf16 matmul (8192; smoke 256)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.export_tokens:
        return export_tokens(args)
    if args.device != "cpu" or args.gpu_mode_smoke:
        if args.device == "cpu" or args.gpu_mode_smoke:
            args.matmul_size = args.matmul_size or 256
        args.matmul_size = args.matmul_size or 8192
        return gpu_benchmark(args)
    args.batch_size = args.batch_size or 32
    args.limit_train_examples = args.limit_train_examples or 256
    if args.limit_train_examples <= 0:
        raise SystemExit("--limit-train-examples: give a positive number of rows per task on the CPU")
    return worker(args) if args.worker else cpu_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
