"""Speed of extractive-QA post-processing on the whole carved SQuAD dev of task_defs/squad.yaml (8 articles).

    PYTHONPATH=. python bench/span_decoding_speed.py

Windows the dev split (uncached), then feeds both dev metrics (exact_match, squad_f1: each decodes every window)
with logits that are random except +10 at each window's gold start and end, in batches of 64, and times the
metric updates and compute (decoding every question over all its windows, then EM/F1). Prints the window and
question counts, both times in seconds and the scores (near 1.0, since the logits point at the gold spans).
"""
import time, torch
from pathlib import Path
from mtdnn.modeling.model import load_tokenizer
from mtdnn.tasks.taskdef import load_task_defs
from mtdnn.tasks.tokenized import tokenized_split
from mtdnn.modeling.metrics import build_metrics, attach_split, compute_metrics, update_metrics
from mtdnn.tasktypes.spans.batches import collate_spans
tok = load_tokenizer('packaged-minilm')
task = load_task_defs('task_defs/squad.yaml')['squad']
t = time.time(); split = tokenized_split(task, 'dev', Path('/work/shared/data'), tok, use_cache=False)
print(f"dev windows {len(split)}, questions {len(set(split.features['example_id']))}, tokenize+window s {time.time()-t:.2f}")
g = torch.Generator().manual_seed(0)
metrics = attach_split(build_metrics(task), split)
batches = []
for s in range(0, len(split), 64):
    batch = collate_spans([split[i] for i in range(s, min(s + 64, len(split)))], 'squad', tok.pad_token_id)
    logits = torch.randn(*batch.input_ids.shape, 2, generator=g).masked_fill(batch.attention_mask.unsqueeze(-1) == 0, -1e4)
    for r, (a, b, _) in enumerate(batch.labels.tolist()):
        if a: logits[r, a, 0] += 10; logits[r, b, 1] += 10
    batches.append((logits, batch))
t = time.time()
for logits, batch in batches:
    update_metrics(metrics, task.type, logits, batch.labels, batch.weight)
scores = compute_metrics(metrics)
print(f"decode + EM/F1 of every question (both metrics, each decodes all windows) s {time.time()-t:.2f}", scores)
