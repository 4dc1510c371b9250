"""Typed batches: each type's collate builds its own batch class with the documented fields and shapes; a batch
pickles (DataLoader workers), moves to a device through Lightning field by field, and keeps its class through
left padding and length buckets."""

import pickle

import pytest
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device

from mtdnn.modeling.model import MultiTaskModel, load_encoder
from mtdnn.tasks.batch import Batch
from mtdnn.tasks.collate import collate
from mtdnn.tasks.tokenized import tokenize_examples
from mtdnn.tasks.rows import IGNORE, Example
from mtdnn.tasks.taskdef import parse_tasks
from mtdnn.tasktypes.mlm.batches import MlmBatch
from mtdnn.tasktypes.sentence.batches import SentenceBatch
from mtdnn.tasktypes.spans.batches import SpanBatch
from mtdnn.tasktypes.spans.squad import Answer, QAExample
from mtdnn.tasktypes.tagging.batches import TaggingBatch
from mtdnn.tasktypes.tagging.conll import TaggedSentence
from mtdnn.training.datamodule import TaskCollator, pad_to_bucket

TASKS = {
    "pair": {"type": "classification", "splits": {"train": {"path": "x.tsv"}}, "text": ["a", "b"], "label": "y",
             "labels": ["no", "yes"], "head": {"type": "san"}},
    "rank": {"type": "ranking", "splits": {"train": {"path": "x.tsv"}}, "text": ["a"], "candidates": ["c0", "c1", "c2"],
             "label": "y"},
    "score": {"type": "regression", "splits": {"train": {"path": "x.tsv"}}, "text": ["a"], "label": "y"},
    "ner": {"type": "sequence_labelling", "splits": {"train": {"path": "n.txt", "format": "conll",
                                                                "columns": ["token", "tag"]}},
            "text": ["token"], "label": "tag", "labels": ["O", "B-PER", "I-PER"]},
    "qa": {"type": "span_extraction", "splits": {"train": {"path": "q.json", "format": "squad"}}, "label": "answers",
           "max_length": 32, "qa": {"doc_stride": 8}},
    "mlm": {"type": "mlm", "splits": {"train": {"path": "x.tsv"}}, "text": ["a"], "max_length": 16,
            "masking": {"strategy": "span", "sbo": True}},
}


@pytest.fixture(scope="module")
def tasks():
    return parse_tasks({"tasks": TASKS}, "mem.yaml")


def _examples(name):
    if name == "pair":
        return [Example("0", 1, "a cat sat", "a cat", label=1), Example("1", 2, "dogs run far away", "dogs", label=0)]
    if name == "rank":
        return [Example("0", 1, "context", candidates=["one", "two words", "three more words"], label=2)]
    if name == "score":
        return [Example("0", 1, "a score", label=3.5), Example("1", 2, "another longer text", label=0.5)]
    if name == "ner":
        return [TaggedSentence("0", 1, ["John", "Smith", "ran"], [1, 2, 0]), TaggedSentence("1", 5, ["hi"], [0])]
    if name == "qa":
        context = "the quick brown fox jumps over the lazy dog " * 3
        return [QAExample("q0", "what jumps?", context, [Answer("fox", context.index("fox"))])]
    return [Example(str(i), i, text) for i, text in enumerate(["the quick brown fox", "jumps over the lazy dog"])]


def _batch(tasks, tokenizer, name, padding_side="right"):
    task = tasks[name]
    split = tokenize_examples(_examples(name), task, tokenizer)
    return task, split, collate([split[i] for i in range(len(split))], task, tokenizer.pad_token_id,
                                tokenizer=tokenizer, padding_side=padding_side)


KINDS = {"pair": SentenceBatch, "rank": SentenceBatch, "score": SentenceBatch, "ner": TaggingBatch, "qa": SpanBatch,
         "mlm": MlmBatch}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_type_collates_into_its_batch_class_with_the_documented_shapes(tasks, tokenizer, name):
    task, split, batch = _batch(tasks, tokenizer, name)
    assert type(batch) is KINDS[name] and isinstance(batch, Batch) and batch.task == name
    n = len(split)
    rows = n * task.num_candidates
    assert batch.input_ids.shape[0] == rows and batch.input_ids.dtype == torch.long
    assert batch.attention_mask.shape == batch.input_ids.shape and batch.idx.tolist() == list(range(n))
    assert batch.weight.dtype == torch.float32 and batch.weight.tolist() == [1.0] * n
    assert batch.examples is None and batch.global_examples is None and batch.teacher_logits is None
    seq_len = batch.input_ids.shape[1]
    expected_labels = {"pair": (n,), "rank": (n,), "score": (n,), "ner": (n, seq_len), "qa": (n, 3),
                       "mlm": (n, seq_len)}[name]
    assert tuple(batch.labels.shape) == expected_labels
    assert batch.labels.dtype == (torch.float32 if name == "score" else torch.long)
    if name == "pair":
        assert set(batch.head_inputs) == {"sequence_ids"} and batch.head_inputs["sequence_ids"].shape == (n, seq_len)
    elif name == "mlm":
        assert set(batch.head_inputs) == {"mlm_positions", "span_boundaries", "span_offsets"}
        assert torch.equal(batch.head_inputs["mlm_positions"], batch.labels != IGNORE)
    else:
        assert batch.head_inputs is None


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_batch_pickles_and_moves_to_a_device_field_by_field(tasks, tokenizer, name):
    _, _, batch = _batch(tasks, tokenizer, name)
    for copy in (pickle.loads(pickle.dumps(batch)), move_data_to_device(batch, torch.device("cpu"))):
        assert type(copy) is type(batch) and copy.task == batch.task
        for field in ("input_ids", "attention_mask", "idx", "weight", "labels"):
            assert torch.equal(getattr(copy, field), getattr(batch, field))
        assert (copy.head_inputs is None) == (batch.head_inputs is None)


def test_left_padding_and_buckets_keep_the_batch_class(tasks, tokenizer):
    _, _, right = _batch(tasks, tokenizer, "pair")
    _, _, left = _batch(tasks, tokenizer, "pair", padding_side="left")
    assert type(left) is SentenceBatch and torch.equal(left.attention_mask.sum(1), right.attention_mask.sum(1))
    assert (left.attention_mask[:, -1] == 1).all() and (left.head_inputs["sequence_ids"][left.attention_mask == 0] == -1).all()
    padded = pad_to_bucket(right, [64], tokenizer.pad_token_id)
    assert type(padded) is SentenceBatch and padded.input_ids.shape[1] == 64
    assert padded.head_inputs["sequence_ids"].shape[1] == 64


def test_the_collator_counts_examples_and_a_batch_is_read_by_field(tasks, tokenizer):
    task = tasks["score"]
    split = tokenize_examples(_examples("score"), task, tokenizer)
    items = [split[(0, 1.0)], split[(1, 0.0)]]
    items[0]["global_examples"] = items[1]["global_examples"] = 5
    batch = TaskCollator([task], tokenizer.pad_token_id)(items)
    assert batch.examples == 1 and batch.global_examples == 5 and batch.weight.tolist() == [1.0, 0.0]
    assert batch.task == "score" and batch.teacher_logits is None and batch.head_kwargs == {}
    # not a mapping (the dict batches of before): a misspelt or dict-style read fails
    with pytest.raises(TypeError):
        batch["labels"]
    with pytest.raises(AttributeError):
        batch.no_such_field


def test_each_type_builds_its_head_and_its_loss_trains_it(tasks, tokenizer, tiny_encoder):
    """Every head name of the six types (linear, SAN, token, span, MLM) is built by its type; the type's loss of
    the head's outputs is a finite scalar whose gradient reaches the head."""
    model = MultiTaskModel(load_encoder(tiny_encoder), dict(tasks))
    assert {tasks[name].head_type for name in tasks} == {"linear", "san", "token", "span", "mlm"}
    # only heads that read a pooled vector get a pooling (issue 26: token-level tasks recorded one they never used)
    assert {n: t.head.pooling for n, t in model.tasks.items()} == {
        "pair": "pooler", "rank": "pooler", "score": "pooler", "ner": None, "qa": None, "mlm": None}
    for name in sorted(tasks):
        task, split, batch = _batch(tasks, tokenizer, name)
        for epoch in range(20):  # the mask depends on the epoch: one with a masked token for the MLM loss
            if name != "mlm" or batch.head_inputs["mlm_positions"].any():
                break
            batch = collate([dict(split[i], epoch=epoch) for i in range(len(split))], task, tokenizer.pad_token_id,
                            tokenizer=tokenizer)
        model.zero_grad()
        outputs = model(name, batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs)
        loss = task.kind.loss(task)(outputs, batch.labels, batch.weight, float(batch.weight.sum()))
        assert loss.dim() == 0 and torch.isfinite(loss), name
        loss.backward()
        grads = [p.grad for p in model.heads[name].parameters() if p.requires_grad]
        assert grads and any(g is not None and g.abs().sum() > 0 for g in grads), name
