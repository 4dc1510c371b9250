"""The task-type registry: every entry's named parts exist, and a new type is one entry."""

import dataclasses

import pytest
import torch

from mtdnn.errors import ConfigError
from mtdnn.modeling.heads import HEADS
from mtdnn.modeling.losses import DISTILLATION_LOSSES, LOSSES
from mtdnn.modeling.metrics import METRICS, build_metrics, compute_metrics, update_metrics
from mtdnn.modeling.model import MultiTaskModel, load_encoder
from mtdnn.tasks import types
from mtdnn.tasks.data import collate, tokenized_split
from mtdnn.tasks.taskdef import parse_tasks
from mtdnn.training.inference import decode


@pytest.mark.parametrize("name", sorted(types.TASK_TYPES))
def test_every_entry_names_registered_heads_losses_and_metrics(name):
    entry = types.TASK_TYPES[name]
    assert entry.name == name
    assert entry.heads and set(entry.heads) <= set(HEADS)
    assert entry.losses and set(entry.losses) <= set(LOSSES)
    assert set(entry.metrics) <= set(METRICS) and set(entry.default_metrics) <= set(entry.metrics)
    if entry.soft_targets is not None:  # a type that can be distilled has a distillation loss
        assert set(entry.losses) <= set(DISTILLATION_LOSSES)


def test_unknown_type_lists_the_registered_ones():
    body = {"type": "tagging", "splits": {"train": {"path": "x.tsv"}}, "text": ["a"], "label": "y"}
    with pytest.raises(ConfigError, match=r"field 'type': unknown task type \(registered types: classification"):
        parse_tasks({"tasks": {"t": body}}, "mem.yaml")


def test_head_type_must_fit_the_task_type():
    body = {"type": "regression", "splits": {"train": {"path": "x.tsv"}}, "text": ["a", "b"], "label": "y",
            "head": {"type": "san"}}
    with pytest.raises(ConfigError, match="head type 'san' does not fit a regression task"):
        parse_tasks({"tasks": {"t": body}}, "mem.yaml")


def _decode_top_two(task, outputs):
    probs = outputs.softmax(-1)
    top = probs.topk(2, dim=-1).indices.tolist()
    return [{"prediction": "|".join(task.labels[i] for i in pair)} for pair in top]


def test_a_new_type_is_one_entry(monkeypatch, tmp_path, tiny_encoder, tokenizer):
    """A type added to the registry alone flows through definition, data, batches, model, metric and decode."""
    entry = dataclasses.replace(types.TASK_TYPES["classification"], name="top_two", metrics=("accuracy",),
                                decode=_decode_top_two)
    monkeypatch.setitem(types.TASK_TYPES, "top_two", entry)
    (tmp_path / "t.tsv").write_text("s\tl\nthe cat sat\ta\na dog ran off\tc\nbirds fly\tb\n")
    task = parse_tasks({"tasks": {"t": {"type": "top_two", "splits": {"train": {"path": "t.tsv"}}, "text": ["s"],
                                        "label": "l", "labels": ["a", "b", "c"]}}}, "mem.yaml")["t"]
    split = tokenized_split(task, "train", tmp_path, tokenizer)
    assert split.labels == [0, 2, 1]
    batch = collate([split[i] for i in range(3)], task, tokenizer.pad_token_id)
    model = MultiTaskModel(load_encoder(tiny_encoder), {"t": task}).eval()
    with torch.no_grad():
        logits = model("t", batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    assert logits.shape == (3, 3)
    metrics = build_metrics(task)
    update_metrics(metrics, task.type, logits, batch["labels"], batch["weight"])
    assert 0.0 <= compute_metrics(metrics)["accuracy"] <= 1.0
    rows = decode(task, logits)
    assert len(rows) == 3 and all(len(r["prediction"].split("|")) == 2 for r in rows)
