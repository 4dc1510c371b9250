"""One rank of the DDP test of SpanScores (tests/test_token_parts.py): gloo on CPU, windows sharded by rank."""

import json
import sys

import torch
import torch.distributed as dist

from mtdnn.modeling.model import load_tokenizer
from mtdnn.modeling.token_metrics import SpanScores
from mtdnn.tasktypes.spans.batches import collate_spans


def main(rank: int, world: int, init_file: str, encoder: str, out: str, count: int) -> None:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_token_parts import oracle_logits, qa_split

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    tokenizer = load_tokenizer(encoder)
    split = qa_split(tokenizer)
    metric = SpanScores(("exact_match", "squad_f1"), n_best=5, max_answer_length=10).attach(split)
    for w in list(range(count))[rank::world]:  # with count < world, some ranks see no window at all
        batch = collate_spans([split[w]], "squad", tokenizer.pad_token_id)
        metric.update(oracle_logits(batch), batch.labels, batch.weight)
    scores = {key: float(v) for key, v in metric.compute().items()}
    answers = {q: p.text for q, p in metric.decoded.items()}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"scores": scores, "answers": answers}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
