"""Padding share of the main job's real training batches, as the toolkit's own DataModule builds them.

    .venv/bin/python bench/padding.py --data-dir ../shared/data [--json padding.json]

For the main job's tasks (RTE, MRPC, STS-B, CoLA; full train splits, MiniLM's tokenizer, seed 42), one epoch of
:class:`~mtdnn.training.datamodule.MultiTaskDataModule` batches (MT-DNN Algorithm 1, single-task batches
length-grouped within the task) for each batch size, ``--pad-to-multiple-of`` and ``--length-buckets`` set-up:
real tokens (attention-mask ones) over padded tokens (the batches' sizes), and the number of distinct padded
shapes. Packing several examples per row is worth building only when real tokens are below 80% of padded
tokens (issue 12). Runs on the CPU in about 20 s (tokenization is cached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json_file  # noqa: E402

SETUPS = [  # (batch size, pad to a multiple of, length buckets)
    (32, 1, None), (32, 8, None), (32, 8, [16, 32, 48, 64, 96, 128]), (32, 8, [32, 64, 96, 128]),
    (256, 1, None), (256, 8, None), (256, 8, [16, 32, 48, 64, 96, 128]), (256, 8, [32, 64, 96, 128]),
]


def padding_share(tasks, data_dir: Path, tokenizer, batch_size: int, multiple: int, buckets) -> dict:
    """One epoch's batches: real and padded tokens, their ratio, the distinct ``(rows, seq_len)`` shapes."""
    from mtdnn.training.datamodule import MultiTaskDataModule

    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=batch_size, seed=42,
                                     pad_to_multiple_of=multiple, length_buckets=buckets)
    datamodule.prepare_data()
    datamodule.setup("fit")
    real = padded = 0
    shapes = set()
    for batch in datamodule.train_dataloader():
        mask = batch.attention_mask
        real, padded = real + int(mask.sum()), padded + mask.numel()
        shapes.add(tuple(mask.shape))
    return {"batch_size": batch_size, "pad_to_multiple_of": multiple, "length_buckets": buckets,
            "real_tokens": real, "padded_tokens": padded, "real_share": real / padded,
            "distinct_seq_lens": len({s[1] for s in shapes}), "distinct_shapes": len(shapes)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--encoder", default="packaged-minilm", help="whose tokenizer (same vocabulary as BERT-base)")
    p.add_argument("--tasks", default="rte,mrpc,stsb,cola")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from mtdnn.modeling.model import load_tokenizer
    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    defs = ROOT / "task_defs" / "glue.yaml"
    tasks = select_tasks(load_task_defs(defs), args.tasks.split(","), str(defs))
    tokenizer, data_dir = load_tokenizer(args.encoder), resolve_data_dir(args.data_dir)
    rows = [padding_share(tasks, data_dir, tokenizer, *setup) for setup in SETUPS]
    print("| batch | pad to multiple of | length buckets | real tokens | padded tokens | real share | seq lens |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        buckets = ",".join(map(str, r["length_buckets"])) if r["length_buckets"] else "-"
        print(f"| {r['batch_size']} | {r['pad_to_multiple_of']} | {buckets} | {r['real_tokens']:,} | "
              f"{r['padded_tokens']:,} | {r['real_share']:.1%} | {r['distinct_seq_lens']} |")
    for label, chosen in (("without length buckets", [r for r in rows if not r["length_buckets"]]),
                          ("with length buckets", [r for r in rows if r["length_buckets"]])):
        lowest = min(r["real_share"] for r in chosen)
        print(f"{label}: lowest real share {lowest:.1%}, packing {'worth building' if lowest < 0.8 else 'not needed'}"
              " (threshold 80%)")
    if args.json:
        write_json_file(args.json, {"tasks": args.tasks.split(","), "encoder": args.encoder, "setups": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
