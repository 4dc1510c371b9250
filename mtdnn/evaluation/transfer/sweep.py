"""The sweep: every (encoder, size, seed) fine-tuned and scored, each finished run kept in ``per_run/``.

A finished run is a JSON record ``per_run/<encoder>/n<size>-seed<seed>.json`` holding its key (everything that
decides its result: the task, splits, subset, settings, encoder weights, accelerator and precision), its metrics,
step count, the ids of the pool examples it trained on and its durations. Running the same sweep again reads a
record back when its key is the same, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from ...errors import CheckpointError, ConfigError
from ...fileio import read_json, write_json_atomic
from ...modeling.model import load_tokenizer
from ...tasks.taskdef import TaskDef
from ...tasks.tokenized import tokenized_split
from .encoders import Encoder, safe_name
from .finetune import evaluate_split, fine_tune
from .settings import TransferSettings

PER_RUN_DIR = "per_run"


def choose_splits(task: TaskDef, pool_split: str | None, eval_split: str | None) -> tuple[str, str]:
    """The pool split (train, else dev) and the evaluation split (dev when the pool is train, else test).

    Raises:
        ConfigError: a split the task does not define, or the same split for both.
    """
    pool = pool_split or ("train" if "train" in task.splits else "dev")
    evaluation = eval_split or ("dev" if pool == "train" else "test")
    for flag, split in (("--pool-split", pool), ("--eval-split", evaluation)):
        if split not in task.splits:
            raise ConfigError(f"{flag}: task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
    if pool == evaluation:
        raise ConfigError(f"--pool-split and --eval-split are both '{pool}': the evaluation set must not be trained on")
    return pool, evaluation



def run_sweep(task: TaskDef, encoders: list[Encoder], sizes: list[int], orders: dict[int, list[int]],
              pool_split: str, eval_split: str, data_dir: Path, eval_examples: int, metric: str,
              settings: TransferSettings, out_dir: Path, accelerator: str = "auto", precision: str = "32-true",
              trust_remote_code: bool = False, fresh: bool = False) -> dict[str, dict[int, dict[int, dict]]]:
    """Fine-tune and score every (encoder, size, seed); return ``records[label][size][seed]``.

    ``orders[seed]`` is the seed's stratified order of the pool (positions); the subset of size k is its first k.
    The first ``eval_examples`` of the evaluation split are scored. A record kept in ``out_dir/per_run/`` with the
    same key is reused unless ``fresh``. Prints one progress line per run.

    Raises:
        KeyboardInterrupt: the user interrupted a fine-tune (finished runs are kept).
    """

    seeds = list(orders)
    records: dict[str, dict[int, dict[int, dict]]] = {}
    total, done = len(encoders) * len(sizes) * len(seeds), 0
    for encoder in encoders:
        tokenizer = load_tokenizer(encoder.path, trust_remote_code)
        pool_set = tokenized_split(task, pool_split, data_dir, tokenizer)
        eval_set = tokenized_split(task, eval_split, data_dir, tokenizer).head(eval_examples)
        records[encoder.label] = {}
        for k in sizes:
            records[encoder.label][k] = {}
            for seed in seeds:
                done += 1
                positions = orders[seed][:k]
                key = {"task": task.to_plain(), "pool_split": pool_split, "eval_split": eval_split,
                       "eval_examples": eval_examples, "n_examples": k, "seed": seed,
                       "subset": _digest(positions), "settings": settings.record(),
                       "encoder": {"path": encoder.path, "weights": encoder.fingerprint(),
                                   "head_from": encoder.head_from},
                       "accelerator": accelerator, "precision": precision}
                cache = out_dir / PER_RUN_DIR / safe_name(encoder.label) / f"n{k}-seed{seed}.json"
                record = None if fresh else _read_cached(cache, key)
                if record is None:
                    start = time.perf_counter()
                    module, trainer = fine_tune(encoder, task, pool_set.subset(positions), tokenizer, settings,
                                                seed, accelerator, precision, out_dir, trust_remote_code)
                    if trainer.interrupted:
                        raise KeyboardInterrupt
                    trained = time.perf_counter()
                    scores = evaluate_split(module.model, task, eval_set, tokenizer.pad_token_id or 0,
                                            settings.eval_batch_size, trainer.strategy.root_device)
                    record = {"key": key, "metrics": scores, "steps": int(trainer.global_step),
                              "example_ids": [pool_set.ids[i] for i in positions],
                              "train_seconds": round(trained - start, 2),
                              "eval_seconds": round(time.perf_counter() - trained, 2)}
                    write_json_atomic(cache, record)
                    del module, trainer
                    status = f"train {record['train_seconds']:.0f} s, eval {record['eval_seconds']:.0f} s"
                else:
                    status = "kept from an earlier run"
                records[encoder.label][k][seed] = record
                print(f"[{done}/{total}] {encoder.label} n={k} seed {seed}: {metric} "
                      f"{record['metrics'][metric]:.4f} ({status})", flush=True)
    return records


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _read_cached(path: Path, key: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        record = read_json(path, CheckpointError, "cached transfer result")
    except CheckpointError as err:  # a damaged cache entry is computed again
        print(f"warning: {err}; computing it again")
        return None
    return record if isinstance(record, dict) and record.get("key") == key else None

