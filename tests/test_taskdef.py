from pathlib import Path

import pytest
import yaml

from mtdnn.errors import ConfigError
from mtdnn.tasks.taskdef import load_task_defs, parse_tasks, select_tasks

ROOT = Path(__file__).resolve().parents[1]

RTE = {
    "type": "classification",
    "splits": {"train": {"path": "glue/RTE/train.tsv"}, "dev": {"path": "glue/RTE/dev.tsv"}},
    "text": ["sentence1", "sentence2"],
    "label": "label",
    "labels": ["entailment", "not_entailment"],
}


def write(tmp_path, tasks) -> Path:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": tasks}))
    return path


def test_glue_yaml_defines_the_glue_tasks_and_their_metrics():
    tasks = load_task_defs(ROOT / "task_defs" / "glue.yaml")
    assert {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "snli", "scitail"} <= set(tasks)
    assert tasks["cola"].metric_names[0] == "mcc"
    assert tasks["mrpc"].metric_names == ["accuracy", "f1"]
    assert tasks["stsb"].metric_names == ["pearson", "spearman"] and tasks["stsb"].type == "regression"
    assert tasks["qqp"].metric_names == ["accuracy", "f1"] and tasks["qqp"].splits["dev"].carve is not None
    assert tasks["qnli"].type == "classification" and "train" not in tasks["qnli"].splits
    assert tasks["rte"].loss_name == "cross_entropy" and tasks["stsb"].loss_name == "mse"
    arct = load_task_defs(ROOT / "task_defs" / "arct.yaml")["arct"]
    assert arct.type == "ranking" and arct.num_candidates == 2 and arct.loss_name == "ranking_cross_entropy"


@pytest.mark.parametrize(
    "change, field, value",
    [
        ({"type": "clasification"}, "type", "clasification"),
        ({"max_lenght": 64}, "max_lenght", "64"),
        ({"max_length": "long"}, "max_length", "long"),
        ({"metrics": ["pearson"]}, "metrics", "pearson"),
        ({"labels": ["only_one"]}, "labels", "only_one"),
        ({"head": {"pooling": "max"}}, "head.pooling", "max"),
        ({"splits": {"train": {"path": "x.tsv", "header": False}}}, "splits.train", "columns"),
        ({"splits": {"train": {"path": "x.tsv", "quoting": "sometimes"}}}, "splits.train.quoting", "sometimes"),
        ({"sampling_weight": -1.0}, "sampling_weight", "-1.0"),
    ],
)
def test_invalid_definitions_name_file_task_field_and_value(tmp_path, change, field, value):
    path = write(tmp_path, {"rte": {**RTE, **change}})
    with pytest.raises(ConfigError) as err:
        load_task_defs(path)
    message = str(err.value)
    assert str(path) in message and "task 'rte'" in message
    assert f"field '{field}'" in message
    assert value in message


def test_top_level_must_be_tasks(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("task:\n  rte: {}\n")
    with pytest.raises(ConfigError, match="top-level key 'tasks'"):
        load_task_defs(path)


def test_not_yaml_and_missing_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tasks: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_task_defs(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_task_defs(tmp_path / "missing.yaml")


def test_integer_label_names_become_strings_and_select_keeps_order():
    tasks = parse_tasks({"tasks": {"a": {**RTE, "labels": [0, 1]}, "b": RTE}}, "mem")
    assert tasks["a"].labels == ["0", "1"]
    assert list(select_tasks(tasks, ["b", "a"], "mem")) == ["b", "a"]
    with pytest.raises(ConfigError, match="no task named c"):
        select_tasks(tasks, ["c"], "mem")


def test_ranking_needs_candidates_and_f1_needs_two_labels():
    with pytest.raises(ConfigError, match="candidates"):
        parse_tasks({"tasks": {"r": {**RTE, "type": "ranking", "labels": None}}}, "mem")
    with pytest.raises(ConfigError, match="exactly two labels"):
        parse_tasks({"tasks": {"m": {**RTE, "labels": ["a", "b", "c"], "metrics": ["f1"]}}}, "mem")


def test_reserved_task_names_cover_the_installed_torchs_module_dict():
    """Task names are checked against a static list (no torch import while reading task definitions): it must
    hold every attribute of the installed torch's ``nn.ModuleDict`` that a task name could spell."""
    import torch
    from transformers import BertConfig, BertModel

    from mtdnn.tasks.taskdef import RESERVED_TASK_NAMES, TASK_NAME, check_task_name

    # a transformers model initialising its weights adds nn.Module.smart_apply: build one, as a run does
    BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8))
    spelled = {n for n in dir(torch.nn.ModuleDict()) if TASK_NAME.fullmatch(n)}
    assert spelled <= RESERVED_TASK_NAMES, sorted(spelled - RESERVED_TASK_NAMES)
    with pytest.raises(ConfigError, match="reserved"):
        check_task_name("keys", "t.yaml")
    assert check_task_name("rte", "t.yaml") == "rte"
