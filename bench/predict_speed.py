"""Batched, length-sorted prediction against scoring one example at a time, on RTE dev.

    .venv/bin/python bench/predict_speed.py --data-dir ../shared/data [--model runs/<run>] [--json out.json]

Every mode starts from the parsed rows of RTE dev (277 pairs) and ends with decoded predictions
(label and probabilities), so tokenization is timed too:

- ``batched, length-sorted``: what ``mtdnn.predict`` does: one tokenizer call, batches of 64 longest first
  (:func:`mtdnn.training.inference.predict_outputs`), outputs put back in input order;
- ``batched, input order``: the same batches without sorting, to show what sorting saves in padding;
- ``one at a time``: tokenize and score each pair alone (batch 1, no padding).

The model is ``--model`` (a run or an export with an ``rte`` head), or by default the packaged MiniLM with a
freshly initialised RTE head (the speed does not depend on the weights). The target of issue 6 is a speed-up
of at least 3x of the first mode over the last (wall clock). Run it on an otherwise idle machine: on a
loaded one, multi-threaded batch-1 inference waits on descheduled threads and looks far slower than it is
(the CPU-seconds columns and the load average in the JSON show it). Prints a table and, with ``--json``,
writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mtdnn.tasks.collate import collate
from mtdnn.tasks.data import load_split, resolve_data_dir  # noqa: E402
from mtdnn.tasks.tokenized import tokenize_examples  # noqa: E402
from mtdnn.training.inference import decode, load_model, predict_outputs  # noqa: E402
from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer  # noqa: E402
from mtdnn.tasks.taskdef import load_task_defs  # noqa: E402


def batched_input_order(model, task, split, pad_id: int, batch_size: int) -> torch.Tensor:
    """Batches of consecutive rows, no length sorting (the order is already the input order)."""
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(split), batch_size):
            batch = collate([split[i] for i in range(start, min(start + batch_size, len(split)))], task, pad_id)
            outputs.append(model(task.name, batch.input_ids, batch.attention_mask, batch.token_type_ids))
    return torch.cat(outputs).float()


def run_mode(mode: str, model, tokenizer, task, examples, batch_size: int) -> tuple[float, float, list[dict]]:
    """Wall-clock seconds, CPU seconds of this process, and the decoded predictions of one mode."""
    pad_id = tokenizer.pad_token_id or 0
    start, cpu_start = time.perf_counter(), time.process_time()
    if mode == "one at a time":
        outputs = torch.cat([predict_outputs(model, task, tokenize_examples([ex], task, tokenizer), pad_id, 1)
                             for ex in examples])
    else:
        split = tokenize_examples(examples, task, tokenizer)
        if mode == "batched, length-sorted":
            outputs = predict_outputs(model, task, split, pad_id, batch_size)
        else:
            outputs = batched_input_order(model, task, split, pad_id, batch_size)
    predictions = decode(task, outputs)
    return time.perf_counter() - start, time.process_time() - cpu_start, predictions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--model", default=None, help="a run or export with an rte head (default: packaged MiniLM)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="use the first N rows of RTE dev (default: all 277)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    task = load_task_defs(ROOT / "task_defs" / "glue.yaml")["rte"]
    examples = load_split(task, "dev", resolve_data_dir(args.data_dir)).examples[: args.limit]
    if args.model:
        loaded = load_model(args.model)
        model, tokenizer, task = loaded.model, loaded.tokenizer, loaded.task("rte")
    else:
        model = MultiTaskModel(load_encoder("packaged-minilm"), {"rte": task}).eval()
        tokenizer = load_tokenizer("packaged-minilm")
    run_mode("batched, length-sorted", model, tokenizer, task, examples[:16], args.batch_size)  # warm-up
    run_mode("one at a time", model, tokenizer, task, examples[:4], args.batch_size)

    modes = ["batched, length-sorted", "batched, input order", "one at a time"]
    results = {mode: run_mode(mode, model, tokenizer, task, examples, args.batch_size) for mode in modes}
    reference = results["batched, length-sorted"][2]
    baseline, cpu_baseline = results["one at a time"][:2]
    rows = []
    for mode, (seconds, cpu_seconds, predictions) in results.items():
        agree = sum(a["prediction"] == b["prediction"] for a, b in zip(predictions, reference)) / len(reference)
        max_diff = max(abs(a["probability"] - b["probabilities"][a["prediction"]])
                       for a, b in zip(predictions, reference))
        rows.append({"mode": mode, "examples": len(examples), "seconds": round(seconds, 3),
                     "cpu_seconds": round(cpu_seconds, 3), "examples_per_s": round(len(examples) / seconds, 1),
                     "speedup_vs_one_at_a_time": round(baseline / seconds, 2),
                     "cpu_time_speedup": round(cpu_baseline / cpu_seconds, 2),
                     "same_label_as_sorted": agree, "max_prob_diff": max_diff})
    print(f"RTE dev, {len(examples)} pairs, {args.model or 'packaged-minilm (untrained head)'}, "
          f"batch {args.batch_size}, torch threads {torch.get_num_threads()}")
    print(f"{'mode':<24} {'seconds':>8} {'cpu s':>8} {'ex/s':>8} {'speed-up':>9} {'cpu x':>6} {'same label':>11} "
          f"{'max |dp|':>9}")
    for r in rows:
        print(f"{r['mode']:<24} {r['seconds']:>8.3f} {r['cpu_seconds']:>8.3f} {r['examples_per_s']:>8.1f} "
              f"{r['speedup_vs_one_at_a_time']:>8.2f}x {r['cpu_time_speedup']:>5.2f}x "
              f"{r['same_label_as_sorted']:>11.3f} {r['max_prob_diff']:>9.1e}")
    target = rows[0]["speedup_vs_one_at_a_time"] >= 3.0
    print(f"target (batched, length-sorted >= 3x one at a time): {'met' if target else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "predict_speed", "task": "rte", "split": "dev",
                                               "model": args.model or "packaged-minilm", "batch_size": args.batch_size,
                                               "threads": torch.get_num_threads(), "torch": torch.__version__,
                                               "load_average": list(os.getloadavg()),
                                               "machine": platform.processor() or platform.machine(),
                                               "rows": rows, "target_met": target}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
