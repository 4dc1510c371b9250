"""The task-type registry: every type's named parts exist, absent operations are absent, and a new type is one
class and one registry entry."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from mtdnn.errors import ConfigError
from mtdnn.modeling.metrics import METRICS, build_metrics, compute_metrics, update_metrics
from mtdnn.modeling.model import MultiTaskModel, load_encoder
from mtdnn.tasks import types
from mtdnn.tasks.collate import collate
from mtdnn.tasks.tokenized import tokenized_split
from mtdnn.tasks.taskdef import parse_tasks
from mtdnn.tasktypes import REGISTERED
from mtdnn.tasktypes.sentence import Classification
from mtdnn.training.inference import decode


@pytest.mark.parametrize("name", sorted(types.TASK_TYPES))
def test_every_entry_names_its_losses_and_registered_metrics(name):
    entry = types.TASK_TYPES[name]
    assert entry.name == name and entry.heads and entry.losses
    assert set(entry.metrics) <= set(METRICS) and set(entry.default_metrics) <= set(entry.metrics)
    for loss in entry.losses:  # each allowed loss name gives a loss function (its heads: tests/test_batches.py)
        named = SimpleNamespace(loss_name=loss)
        assert callable(entry.loss(named)) and entry.loss(named).__name__ == loss
        # a type that can be distilled has a distillation loss, and only such a type
        assert (entry.distillation_loss is None) == (entry.soft_targets is None)
        if entry.distillation_loss is not None:
            assert callable(entry.distillation_loss(named))


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


class TopTwo(Classification):
    """A new type: classification whose prediction is the two most probable labels."""

    name = "top_two"
    metrics = ("accuracy",)

    def decode(self, task, outputs):
        return _decode_top_two(task, outputs)


def test_a_new_type_is_one_entry(monkeypatch, tmp_path, tiny_encoder, tokenizer):
    """A type added to the registry alone flows through definition, data, batches, model, metric and decode."""
    monkeypatch.setitem(types.TASK_TYPES, "top_two", TopTwo())
    (tmp_path / "t.tsv").write_text("s\tl\nthe cat sat\ta\na dog ran off\tc\nbirds fly\tb\n")
    task = parse_tasks({"tasks": {"t": {"type": "top_two", "splits": {"train": {"path": "t.tsv"}}, "text": ["s"],
                                        "label": "l", "labels": ["a", "b", "c"]}}}, "mem.yaml")["t"]
    split = tokenized_split(task, "train", tmp_path, tokenizer)
    assert split.labels == [0, 2, 1]
    batch = collate([split[i] for i in range(3)], task, tokenizer.pad_token_id)
    model = MultiTaskModel(load_encoder(tiny_encoder), {"t": task}).eval()
    with torch.no_grad():
        logits = model("t", batch.input_ids, batch.attention_mask, batch.token_type_ids)
    assert logits.shape == (3, 3)
    metrics = build_metrics(task)
    update_metrics(metrics, task.type, logits, batch.labels, batch.weight)
    assert 0.0 <= compute_metrics(metrics)["accuracy"] <= 1.0
    rows = decode(task, logits)
    assert len(rows) == 3 and all(len(r["prediction"].split("|")) == 2 for r in rows)


def test_the_registry_is_the_registered_classes_in_order():
    assert [type(k) for k in types.TASK_TYPES.values()] == list(REGISTERED)
    assert list(types.TASK_TYPES) == ["classification", "regression", "ranking", "mlm", "sequence_labelling",
                                      "span_extraction"]


OPTIONAL = ("read_file", "make_examples", "parse_label", "output_width", "head_outputs", "decode")


@pytest.mark.parametrize("name", sorted(types.TASK_TYPES))
def test_an_operation_a_type_lacks_is_absent_not_a_stub(name):
    """Each optional operation is None (absent) or a method of the type's own class; whole-file types read no
    table rows, row types read no whole files, and only unlabelled types lack a label."""
    kind = types.TASK_TYPES[name]
    present = {op for op in OPTIONAL if getattr(kind, op) is not None}
    assert ("read_file" in present) != ("make_examples" in present)  # a file is read whole or by rows
    assert ("parse_label" in present) == (kind.labelled and "make_examples" in present)
    assert ("decode" in present) == (kind.no_predictions == types.TaskKind.no_predictions)
    expected = {"classification": set(OPTIONAL) - {"read_file"}, "regression": set(OPTIONAL) - {"read_file"},
                "ranking": set(OPTIONAL) - {"read_file"}, "mlm": {"make_examples"},
                "sequence_labelling": {"read_file", "output_width", "decode"},
                "span_extraction": {"read_file", "output_width", "decode"}}
    assert present == expected[name]


def test_definition_reading_and_tokenization_import_no_torch():
    """``import mtdnn`` fills the registry with every type and imports no torch (collate, metric inputs and decode
    import it when first called)."""
    code = ("import sys, mtdnn; from mtdnn.tasks.types import TASK_TYPES; from mtdnn.tasks.taskdef import parse_tasks; "
            "import mtdnn.tasktypes.tagging.features, mtdnn.tasktypes.spans.features, mtdnn.tasktypes.mlm.masking; "
            "assert len(TASK_TYPES) == 6, TASK_TYPES; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
