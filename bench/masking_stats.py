"""Masking statistics of the MLM strategies on real text: rate, span lengths, whole words, masks across epochs.

    python bench/masking_stats.py --data-dir ../shared/data [--spans 10000] [--output bench/results/masking-stats.json]

The texts are the train splits of RTE, MRPC, STS-B and CoLA (both sentences of a pair), packed into sequences of
128 tokens by the ``mlm`` task type's tokenization with the packaged MiniLM tokenizer, exactly as an MLM task over
the four tasks' texts is (``mtdnn.tasks.mlm``). Each strategy masks the sequences with
``mtdnn.tasks.masking.mask_sequence`` (the function batches use) at rate 0.15, seed 0, epoch 0, until at least
``--spans`` spans are masked (spans are single tokens for static/dynamic, words for whole_word). Reported per
strategy: masking rate (predicted tokens / maskable tokens), mean span length in words, words split by a
span, the 80/10/10 replacement shares, and the share of sequences whose mask differs between epochs 0 and 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mtdnn.fileio import write_json_atomic  # noqa: E402
from mtdnn.modeling.model import load_tokenizer  # noqa: E402
from mtdnn.tasks.data import resolve_data_dir  # noqa: E402
from mtdnn.tasks.tokenized import tokenized_split  # noqa: E402
from mtdnn.tasktypes.mlm.masking import mask_sequence, rng_for, words_of  # noqa: E402
from mtdnn.tasks.taskdef import load_task_defs, parse_tasks  # noqa: E402

TASKS = ["rte", "mrpc", "stsb", "cola"]
STRATEGIES = ["static", "dynamic", "whole_word", "span"]
RATE, SEED = 0.15, 0


def packed_sequences(data_dir: Path, tokenizer, max_length: int) -> list[tuple[list[int], list[int]]]:
    """(input_ids, word_ids) of the packed train texts of the four tasks, one MLM task per source file."""
    glue = load_task_defs(ROOT / "task_defs" / "glue.yaml")
    sequences = []
    for name in TASKS:
        source = glue[name]
        body = {"type": "mlm", "splits": {"train": source.splits["train"].model_dump(mode="json", exclude_none=True)},
                "text": list(source.text), "max_length": max_length}
        task = parse_tasks({"tasks": {f"{name}_mlm": body}}, "bench")[f"{name}_mlm"]
        split = tokenized_split(task, "train", data_dir, tokenizer)
        sequences += list(zip(split.input_ids, split.features["word_ids"]))
    return sequences


def measure(strategy: str, sequences, tokenizer, spans_wanted: int) -> dict:
    special = set(tokenizer.all_special_ids)
    args = (tokenizer.mask_token_id, len(tokenizer), special)
    masked_tokens = maskable_tokens = split_words = sequences_used = 0
    span_words: list[int] = []
    replacement = Counter()
    differs = 0
    for row, (ids, word_ids) in enumerate(sequences):
        epoch0 = None if strategy == "static" else 0
        m = mask_sequence(ids, word_ids, strategy, RATE, rng_for(SEED, epoch0, row), *args)
        m1 = mask_sequence(ids, word_ids, strategy, RATE, rng_for(SEED, None if strategy == "static" else 1, row),
                           *args)
        differs += m.labels != m1.labels
        sequences_used += 1
        words = words_of(word_ids)
        maskable_tokens += sum(e - s for s, e in words)
        chosen = {i for s, e in m.spans for i in range(s, e)}
        masked_tokens += len(chosen)
        split_words += sum(0 < len(set(range(s, e)) & chosen) < e - s for s, e in words)
        span_words += m.span_words
        for i in chosen:
            replacement["mask" if m.input_ids[i] == tokenizer.mask_token_id
                        else "unchanged" if m.input_ids[i] == ids[i] else "random"] += 1
        if len(span_words) >= spans_wanted:
            break
    total = sum(replacement.values())
    lengths = Counter(span_words)
    return {"strategy": strategy, "sequences": sequences_used, "spans": len(span_words),
            "masked_tokens": masked_tokens, "maskable_tokens": maskable_tokens,
            "masking_rate": masked_tokens / maskable_tokens,
            "mean_span_words": sum(span_words) / len(span_words),
            "span_words_histogram": {str(k): lengths[k] for k in sorted(lengths)},
            "words_split": split_words,
            "replacement": {k: replacement[k] / total for k in ("mask", "random", "unchanged")},
            "mask_differs_epoch0_vs_1": differs / sequences_used}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--spans", type=int, default=10_000, help="spans to mask per strategy (default 10000)")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--output", default=str(ROOT / "bench" / "results" / "masking-stats.json"))
    args = p.parse_args(argv)
    tokenizer = load_tokenizer("packaged-minilm")
    start = time.perf_counter()
    sequences = packed_sequences(resolve_data_dir(args.data_dir), tokenizer, args.max_length)
    results = [measure(s, sequences, tokenizer, args.spans) for s in STRATEGIES]
    header = (f"{'strategy':<11} {'sequences':>9} {'spans':>6} {'rate':>7} {'span words':>10} {'words split':>11} "
              f"{'mask/rand/same':>16} {'differs e0/e1':>13}")
    print(header)
    for r in results:
        rep = r["replacement"]
        print(f"{r['strategy']:<11} {r['sequences']:>9} {r['spans']:>6} {r['masking_rate']:>7.4f} "
              f"{r['mean_span_words']:>10.3f} {r['words_split']:>11} "
              f"{rep['mask']:.3f}/{rep['random']:.3f}/{rep['unchanged']:.3f} {r['mask_differs_epoch0_vs_1']:>13.3f}")
    out = {"command": "python bench/masking_stats.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "tokenizer": "packaged-minilm", "tasks": TASKS, "max_length": args.max_length, "rate": RATE, "seed": SEED,
           "packed_sequences": len(sequences), "seconds": round(time.perf_counter() - start, 1), "results": results}
    write_json_atomic(args.output, out)
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
