"""Training throughput on the CPU: mtdnn's own loader and module against a plain transformers ``Trainer``.

Compares four set-ups on the same examples::

    .venv/bin/python bench/throughput.py --data-dir ../shared/data --tasks rte,mrpc,stsb,cola \\
        --limit-train-examples 256 --json bench-throughput.json

- ``mtdnn``: what ``python -m mtdnn.train`` builds: :class:`~mtdnn.training.datamodule.MultiTaskDataModule` (cached
  tokenization, MT-DNN Algorithm 1 schedule, single-task length-grouped batches, dynamic padding) and
  :class:`~mtdnn.training.module.MultiTaskModule` under a Lightning ``Trainer``;
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

The GPU benchmark of the trainer (model FLOP/s, the plain-loop ratio, the Hugging Face reference) is
``bench/trainer_speed.py``.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import StepClock, peak_rss_mib  # noqa: E402  (bench/common.py)

SETUPS = ("mtdnn", "hf_max_length", "hf_dynamic", "hf_grouped")
DEFAULT_TASKS = "rte,mrpc,stsb,cola"
RESULT_PREFIX = "THROUGHPUT_RESULT "
CPU_TARGETS = {"hf_max_length": 3.0, "hf_dynamic": 1.2}  # minimum speed-up of mtdnn (examples/s) over these


# ------------------------------------------------------------------------------------------------ (a) mtdnn


def run_mtdnn(args: argparse.Namespace) -> dict:
    """One epoch of the toolkit's own training: the pieces ``mtdnn.train`` builds, without the run directory."""
    import pytorch_lightning as pl
    import torch

    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
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
            clock.add_batch(batch.attention_mask)

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
        self.clock.add_batch(batch.attention_mask)
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


# ------------------------------------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated tasks of task_defs/glue.yaml")
    p.add_argument("--limit-train-examples", type=int, default=256, metavar="N",
                   help="the first N train rows of each task")
    p.add_argument("--json", default=None, help="write the results to this JSON file (atomically)")
    p.add_argument("--encoder", default="packaged-minilm", help="Hugging Face encoder name or path")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--runs", type=int, default=3, help="runs per set-up (the median is reported)")
    p.add_argument("--setups", default=",".join(SETUPS), help="which set-ups to run")
    p.add_argument("--warmup-steps", type=int, default=3, help="optimizer steps excluded from timing")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--worker", choices=SETUPS, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.limit_train_examples <= 0:
        raise SystemExit("--limit-train-examples: give a positive number of rows per task on the CPU")
    return worker(args) if args.worker else cpu_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
