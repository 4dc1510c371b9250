"""Issue 24 (hardening, round 3), kinds 5, 6 and 10, each example and a second input of each kind as a test.

5. A cache entry or an export whose parts do not belong together: rebuilt (cache) or refused (export, exit 2).
6. Input read differently from what it says: line ends, JSON types, the number grammar, the Python API's items.
10. Messages that show too much: file content quoted by a bounded prefix; task-definition paths kept inside the
    data root.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from mtdnn.cli import predict
from mtdnn.errors import CheckpointError, ConfigError, DataError, run_cli

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def exit_code_and_error(command, args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(command.main, [str(a) for a in args])
    return exit_info.value.code, capsys.readouterr().err


def _export(tiny_encoder, path: Path, seed: int, labels: list[str] | None = None) -> Path:
    import torch

    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.export import export_model

    tasks = select_tasks(load_task_defs(GLUE), ["rte"], GLUE)
    if labels is not None:
        tasks = {n: t.model_copy(update={"labels": labels}) for n, t in tasks.items()}
    torch.manual_seed(seed)
    model = MultiTaskModel(load_encoder(tiny_encoder), tasks)
    return export_model(model, load_tokenizer(tiny_encoder), tasks, path, source_encoder=tiny_encoder)


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_encoder) -> tuple[Path, Path]:
    """Two exports of the same task (rte) from different "runs" (different head initialisations)."""
    root = tmp_path_factory.mktemp("exports")
    return _export(tiny_encoder, root / "a", 1), _export(tiny_encoder, root / "b", 2)


@pytest.fixture
def export(exports, tmp_path) -> Path:
    """A fresh copy of export a, for a test to damage."""
    return Path(shutil.copytree(exports[0], tmp_path / "export"))


# ------------------------------------------------------------------------------------- 5. parts that belong


def test_export_records_digests_and_loads(export):
    from mtdnn.training.export import load_export

    meta = json.loads((export / "mtdnn_export.json").read_text())
    assert {"heads.safetensors", "tasks.yaml", "encoder/config.json", "encoder/model.safetensors"} <= set(meta["digests"])
    model, _, tasks = load_export(export)
    assert list(tasks) == ["rte"]


def test_export_heads_from_another_run_refused(export, exports, capsys):
    shutil.copy(exports[1] / "heads.safetensors", export / "heads.safetensors")
    with pytest.raises(CheckpointError, match="heads.safetensors: does not match the digest"):
        __import__("mtdnn").load(export)
    code, err = exit_code_and_error(predict, [export, "--task", "rte", "--text", "a", "b"], capsys)
    assert code == 2 and "heads.safetensors" in err


def test_export_tasks_yaml_from_another_export_refused(export, tiny_encoder, tmp_path):
    """Second input of kind 5: tasks.yaml of an export of the same task with its label names in another order
    (the heads would load and predict the other label names)."""
    other = _export(tiny_encoder, tmp_path / "swapped", 1, labels=["not_entailment", "entailment"])
    shutil.copy(other / "tasks.yaml", export / "tasks.yaml")
    from mtdnn.training.export import load_export, resolve_export

    with pytest.raises(CheckpointError, match="tasks.yaml: does not match the digest"):
        load_export(export)
    with pytest.raises(CheckpointError, match="tasks.yaml"):
        resolve_export(export)


def test_export_config_changed_to_three_layers_refused(export, capsys):
    config = json.loads((export / "encoder" / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (export / "encoder" / "config.json").write_text(json.dumps(config))
    code, err = exit_code_and_error(predict, [export, "--task", "rte", "--text", "a", "b"], capsys)
    assert code == 2 and "encoder/config.json: does not match the digest" in err


def test_export_missing_keys_refused_even_with_matching_digests(export):
    """The digests rewritten to match the edited config: the encoder's missing layer is still refused."""
    from mtdnn.fileio import file_digest
    from mtdnn.training.export import load_export

    config = json.loads((export / "encoder" / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (export / "encoder" / "config.json").write_text(json.dumps(config))
    meta = json.loads((export / "mtdnn_export.json").read_text())
    meta["digests"]["encoder/config.json"] = file_digest(export / "encoder" / "config.json")
    (export / "mtdnn_export.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="missing keys: encoder.layer.2"):
        load_export(export)


def test_export_bytes_changed_in_place_same_size_refused(export):
    from mtdnn.training.export import load_export

    path = export / "encoder" / "model.safetensors"
    size = path.stat().st_size
    with path.open("r+b") as f:  # the last bytes are tensor data: a changed weight, same size
        f.seek(size - 4)
        old = f.read(4)
        f.seek(size - 4)
        f.write(bytes(b ^ 0xFF for b in old))
    assert path.stat().st_size == size
    with pytest.raises(CheckpointError, match="model.safetensors: does not match the digest"):
        load_export(export)


def test_export_unrecorded_encoder_file_refused(export):
    from mtdnn.training.export import load_export

    (export / "encoder" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="pytorch_model.bin: not part of the export"):
        load_export(export)


def test_export_without_digests_loads_with_warning(export, caplog):
    from mtdnn.training.export import load_export

    meta = json.loads((export / "mtdnn_export.json").read_text())
    del meta["digests"]
    (export / "mtdnn_export.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        load_export(export)
    assert "written before exports recorded the digests" in caplog.text


def test_export_encoder_loaded_alone_is_checked(export):
    """An export's encoder folder loaded by path (init_from, students, transfer) is checked too."""
    from mtdnn.modeling.model import load_encoder

    (export / "encoder" / "config.json").write_text((export / "encoder" / "config.json").read_text() + " ")
    with pytest.raises(CheckpointError, match="config.json: does not match"):
        load_encoder(str(export / "encoder"))


def test_pretrained_checkpoint_with_mlm_head_still_loads(tmp_path):
    """A pretrained starting point saved with its MLM head (unexpected cls.*, missing pooler.*) loads."""
    from transformers import BertConfig, BertForMaskedLM

    from mtdnn.modeling.model import load_encoder

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    encoder = load_encoder(str(tmp_path / "mlm"))
    assert encoder.config.num_hidden_layers == 2


def _pair_task(tmp_path: Path, rows: int, name: str = "tiny", fmt: str = "tsv") -> Path:
    train = ["sentence1\tsentence2\tlabel"] + [f"train premise {i}\ttrain hypothesis {i}\t{'yes' if i % 2 else 'no'}"
                                               for i in range(rows)]
    dev = ["sentence1\tsentence2\tlabel"] + [f"dev premise {i}\tdev hypothesis {i}\t{'yes' if i % 2 else 'no'}"
                                             for i in range(3)]
    (tmp_path / "train.tsv").write_text("\n".join(train) + "\n")
    (tmp_path / "dev.tsv").write_text("\n".join(dev) + "\n")
    path = tmp_path / "tiny.yaml"
    path.write_text(f"tasks:\n  {name}:\n    type: classification\n    splits:\n      train: {{path: train.tsv}}\n"
                    "      dev: {path: dev.tsv}\n    text: [sentence1, sentence2]\n    label: label\n"
                    "    labels: ['no', 'yes']\n")
    return path


@pytest.fixture
def cached(tmp_path, monkeypatch, tokenizer):
    """``(task, tokenized(split), cache root)`` over a 7-row train and 3-row dev file, in a fresh cache."""
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.tasks.taskdef import load_task_defs

    monkeypatch.setenv("MTDNN_CACHE_DIR", str(tmp_path / "cache"))
    task = load_task_defs(_pair_task(tmp_path, 7))["tiny"]
    return task, lambda split: tokenized_split(task, split, tmp_path, tokenizer), tmp_path / "cache" / "tokenized"


def _entry(root: Path, split: str) -> Path:
    [entry] = [p for p in root.iterdir() if p.name.startswith(f"tiny-{split}-")]
    return entry


def test_cache_train_entry_replaced_by_dev_rebuilt(cached, caplog):
    task, load, root = cached
    assert len(load("train")) == 7 and len(load("dev")) == 3
    train, dev = _entry(root, "train"), _entry(root, "dev")
    shutil.rmtree(train)
    shutil.copytree(dev, train)
    with caplog.at_level(logging.WARNING):
        again = load("train")
    assert len(again) == 7 and again.ids == [str(i) for i in range(7)]
    assert "field 'key'" in caplog.text or "field 'split'" in caplog.text
    assert len(load("train")) == 7  # the rebuilt entry is used from then on


def test_cache_arrow_bytes_changed_in_place_rebuilt(cached, caplog):
    task, load, root = cached
    first = load("train")
    [arrow] = list(_entry(root, "train").glob("*.arrow"))
    size = arrow.stat().st_size
    with arrow.open("r+b") as f:  # one byte of the table changed in place: same size, same row count
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    assert arrow.stat().st_size == size
    with caplog.at_level(logging.WARNING):
        again = load("train")
    assert "does not match its recorded digest" in caplog.text
    assert again.input_ids == first.input_ids


def test_cache_entry_without_record_rebuilt(cached, caplog):
    """Second input of kind 5: an entry written before records existed (no mtdnn_cache.json) is rebuilt."""
    task, load, root = cached
    load("train")
    (_entry(root, "train") / "mtdnn_cache.json").unlink()
    with caplog.at_level(logging.WARNING):
        assert len(load("train")) == 7
    assert "no readable mtdnn_cache.json" in caplog.text
    assert (_entry(root, "train") / "mtdnn_cache.json").is_file()


def test_cache_ids_swapped_with_record_rewritten_rebuilt(cached, caplog):
    """A row-id change the files' digests were updated for is still seen by the row ids' digest."""
    import datasets

    from mtdnn.fileio import file_digests

    task, load, root = cached
    load("train")
    entry = _entry(root, "train")
    ds = datasets.load_from_disk(str(entry))
    changed = ds.to_dict()
    changed["id"] = list(reversed(changed["id"]))
    tmp = entry.with_name("tmp")
    datasets.Dataset.from_dict(changed).save_to_disk(str(tmp))
    record = json.loads((entry / "mtdnn_cache.json").read_text())
    shutil.rmtree(entry)
    tmp.rename(entry)
    record["files"] = file_digests(entry)
    (entry / "mtdnn_cache.json").write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        assert load("train").ids == [str(i) for i in range(7)]
    assert "row ids differ" in caplog.text


# ------------------------------------------------------------------------------------- 6. read as it says


def _rte_task():
    from mtdnn.tasks.taskdef import load_task_defs

    return load_task_defs(GLUE)["rte"]


def test_predict_input_u2028_inside_a_field_is_text(tmp_path):
    """A malformed line (three fields) with U+2028 in its second field stays one malformed line."""
    from mtdnn.evaluation.predict import read_input

    path = tmp_path / "pairs.tsv"
    path.write_text("a premise\ta hypothesis\u2028second premise\tsecond hypothesis\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1: task 'rte': expected 2 tab-separated field"):
        read_input(str(path), "tsv", _rte_task())


@pytest.mark.parametrize("separator", ["\x85", "\x0c", "\x0b", "\x1e", "\u2029"])
def test_predict_input_other_unicode_line_breaks_are_text(tmp_path, separator):
    """Second input of kind 6: U+0085 (NEL), form feed, vertical tab, U+001E and U+2029 inside a field: one
    example whose text keeps the character, ids unshifted."""
    from mtdnn.evaluation.predict import read_input

    path = tmp_path / "pairs.tsv"
    path.write_text(f"first{separator}premise\thypothesis\nsecond\thypothesis\n", encoding="utf-8")
    examples = read_input(str(path), "tsv", _rte_task())
    assert [ex.id for ex in examples] == ["0", "1"] and examples[0].text_a == f"first{separator}premise"
    assert [ex.line for ex in examples] == [1, 2]


def test_a_lone_carriage_return_ends_a_line_in_every_reader(tmp_path, tokenizer):
    """The one rule: \\n, \\r\\n and a lone \\r end a line, in predict --input and in training files alike."""
    from mtdnn.evaluation.predict import read_input
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    text = "sentence1\tsentence2\tlabel\rp one\th one\tyes\r\np two\u2028more\th two\tno\n"
    (tmp_path / "train.tsv").write_text(text, encoding="utf-8", newline="")
    (tmp_path / "dev.tsv").write_text(text, encoding="utf-8", newline="")
    (tmp_path / "t.yaml").write_text(
        "tasks:\n  t:\n    type: classification\n    splits:\n      train: {path: train.tsv}\n"
        "      dev: {path: dev.tsv}\n    text: [sentence1, sentence2]\n    label: label\n    labels: ['no', 'yes']\n")
    task = load_task_defs(tmp_path / "t.yaml")["t"]
    trained = load_split(task, "train", tmp_path).examples
    (tmp_path / "raw.tsv").write_text(text.split("\r", 1)[1].replace("\tyes", "").replace("\tno", ""),
                                      encoding="utf-8", newline="")
    predicted = read_input(str(tmp_path / "raw.tsv"), "tsv", task)
    assert [ex.text_a for ex in trained] == [ex.text_a for ex in predicted] == ["p one", "p two\u2028more"]


def _jsonl_task(tmp_path: Path, line: str, label_type: str = "classification") -> "object":
    from mtdnn.tasks.taskdef import load_task_defs

    good = '{"sentence1": "a", "sentence2": "b", "label": "yes"}' if label_type == "classification" else \
        '{"sentence1": "a", "sentence2": "b", "label": 1.5}'
    (tmp_path / "train.jsonl").write_text(good + "\n" + line + "\n")
    labels = "    labels: ['no', 'yes']\n" if label_type == "classification" else ""
    (tmp_path / "t.yaml").write_text(
        f"tasks:\n  t:\n    type: {label_type}\n    splits:\n      train: {{path: train.jsonl, format: jsonl}}\n"
        f"      dev: {{path: train.jsonl, format: jsonl}}\n    text: [sentence1, sentence2]\n    label: label\n"
        + labels)
    return load_task_defs(tmp_path / "t.yaml")["t"]


@pytest.mark.parametrize("value,kind", [('["a", "list"]', "an array"), ("5", "a number"),
                                        ("true", "a boolean"), ('{"k": 1}', "an object")])
def test_jsonl_training_text_that_is_not_a_string_refused(tmp_path, value, kind):
    from mtdnn.tasks.data import load_split

    task = _jsonl_task(tmp_path, f'{{"sentence1": {value}, "sentence2": "b", "label": "no"}}')
    with pytest.raises(DataError, match=f"train.jsonl: line 2: task 't', field 'sentence1': expected a string "
                                        f"\\(or null\\), found {kind}"):
        load_split(task, "train", tmp_path)


def test_jsonl_training_label_as_a_list_refused_number_accepted(tmp_path):
    """Second input of kind 6 (JSON types): a label that is a JSON array is refused; a JSON number label is the
    number it spells."""
    from mtdnn.tasks.data import load_split

    task = _jsonl_task(tmp_path, '{"sentence1": "a", "sentence2": "b", "label": [1]}')
    with pytest.raises(DataError, match="line 2: task 't', field 'label': expected a string or a number, found an array"):
        load_split(task, "train", tmp_path)
    (tmp_path / "int").mkdir()
    task = _jsonl_task(tmp_path / "int", '{"sentence1": "a", "sentence2": "b", "label": 1}')
    assert [ex.label for ex in load_split(task, "train", tmp_path / "int").examples] == [1, 1]
    task = _jsonl_task(tmp_path, '{"sentence1": "a", "sentence2": "b", "label": 2.5e0}', "regression")
    assert [ex.label for ex in load_split(task, "train", tmp_path).examples] == [1.5, 2.5]


def test_jsonl_training_refusal_exits_2(tmp_path, capsys):
    from mtdnn.cli import train

    _jsonl_task(tmp_path, '{"sentence1": 7, "sentence2": "b", "label": "no"}')
    code, err = exit_code_and_error(train, [tmp_path / "t.yaml", "--data-dir", tmp_path, "--output-dir",
                                            tmp_path / "run", "--max-steps", "1"], capsys)
    assert code == 2 and "line 2" in err and "field 'sentence1'" in err and "train.jsonl" in err


def _score_task(tmp_path: Path, score: str):
    from mtdnn.tasks.taskdef import load_task_defs

    (tmp_path / "train.tsv").write_text(f"s1\ts2\tscore\na\tb\t1.5\nc\td\t{score}\n")
    (tmp_path / "t.yaml").write_text(
        "tasks:\n  t:\n    type: regression\n    splits:\n      train: {path: train.tsv}\n"
        "      dev: {path: train.tsv}\n    text: [s1, s2]\n    label: score\n")
    return load_task_defs(tmp_path / "t.yaml")["t"]


@pytest.mark.parametrize("score", ["1_0", "nan", "inf", "-Infinity", "\u0663", "1e", ".", "0x10", "1e400"])
def test_scores_follow_one_number_grammar(tmp_path, score):
    from mtdnn.tasks.data import load_split

    with pytest.raises(DataError, match="line 3: task 't', field 'score': not a"):
        load_split(_score_task(tmp_path, score), "train", tmp_path)


@pytest.mark.parametrize("score,value", [(" 3 ", 3.0), ("-.5", -0.5), ("2.", 2.0), ("+1E-3", 0.001), ("4.25", 4.25)])
def test_scores_of_the_grammar_accepted(tmp_path, score, value):
    from mtdnn.tasks.data import load_split

    assert load_split(_score_task(tmp_path, score), "train", tmp_path).examples[1].label == value


@pytest.mark.parametrize("label", ["\uff11", "\u0661", "1_0", "+ 1"])
def test_class_ids_follow_the_number_grammar(tmp_path, label):
    """Second input of kind 6 (numbers): a class id written in fullwidth or Arabic-Indic digits, which
    ``str.isdigit`` and ``int`` accept, is not a label."""
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    (tmp_path / "train.tsv").write_text(f"s1\tlabel\na\t0\nb\t{label}\n")
    (tmp_path / "t.yaml").write_text(
        "tasks:\n  t:\n    type: classification\n    splits:\n      train: {path: train.tsv}\n"
        "      dev: {path: train.tsv}\n    text: [s1]\n    label: label\n    labels: ['no', 'yes']\n")
    with pytest.raises(DataError, match="line 3: task 't', field 'label': not a label"):
        load_split(load_task_defs(tmp_path / "t.yaml")["t"], "train", tmp_path)


class _Loaded:
    """A stand-in for LoadedModel: just what TrainedModel.predict reads before predicting."""

    def __init__(self, tasks):
        self.tasks, self.model_dir = tasks, "model"

    def task(self, name):
        return self.tasks[name]


def test_api_predict_mapping_by_column_name(export):
    import mtdnn

    model = mtdnn.load(export)
    by_name = model.predict([{"sentence2": "A cat was sitting.", "sentence1": "The cat sat."}], task="rte")
    by_tuple = model.predict([("The cat sat.", "A cat was sitting.")], task="rte")
    assert by_name == by_tuple
    assert model.predict({"sentence1": "The cat sat.", "sentence2": "A cat was sitting."}, task="rte") == by_tuple
    with pytest.raises(DataError, match="input 0: task 'rte': the mapping has no key 'sentence2'"):
        model.predict([{"sentence1": "x", "hypothesis": "y"}], task="rte")


@pytest.mark.parametrize("item,kind", [({"The cat sat.", "A cat was sitting."}, "set"), (b"bytes", "bytes"),
                                       (["The cat sat.", "A cat"], "list"), (7, "int"), (None, "NoneType")])
def test_api_predict_refuses_items_that_are_not_texts(item, kind):
    """Second input of kind 6 (the API): a set of two texts (unordered: the pair's order would be arbitrary),
    bytes (iterate as numbers), a list, a number, None: refused naming the item's index and type."""
    from mtdnn.evaluation.model import TrainedModel

    model = TrainedModel(_Loaded({"rte": _rte_task()}))
    with pytest.raises(DataError, match=f"input 1: task 'rte': expected a string, a tuple .* found {kind}"):
        model.predict([("a", "b"), item], task="rte")
    with pytest.raises(DataError, match="input 0: task 'rte', field 'sentence2': expected a string, found int"):
        model.predict([("a", 5)], task="rte")


# ------------------------------------------------------------------------------------- 10. show no more


def _task_file(tmp_path: Path, train_path: str, fmt: str = "tsv", extra: str = "") -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(f"tasks:\n  t:\n    type: classification\n    splits:\n      train: {{path: '{train_path}', "
                    f"format: {fmt}{extra}}}\n    text: [sentence1, sentence2]\n    label: label\n"
                    "    labels: ['no', 'yes']\n")
    return path


@pytest.mark.parametrize("path", ["/proc/self/environ", "../outside.tsv", "glue/../../outside.tsv", "..",
                                  "C:/data/train.tsv", "\\\\server\\share\\train.tsv"])
def test_task_paths_outside_the_data_root_refused(tmp_path, path):
    from mtdnn.tasks.taskdef import load_task_defs

    with pytest.raises(ConfigError, match="field 'splits.train.path': (an absolute path|climbs out of the data root)"):
        load_task_defs(_task_file(tmp_path, path))


def test_task_path_environ_exits_2_without_printing_the_environment(tmp_path, capsys, monkeypatch):
    from mtdnn.cli import train

    monkeypatch.setenv("MTDNN_SECRET_FOR_TEST", "do-not-print-me")
    code, err = exit_code_and_error(train, [_task_file(tmp_path, "/proc/self/environ"), "--data-dir", tmp_path,
                                            "--output-dir", tmp_path / "run"], capsys)
    assert code == 2 and "an absolute path" in err and "do-not-print-me" not in err


def test_task_path_inside_the_root_with_dots_allowed(tmp_path):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    (tmp_path / "glue").mkdir()
    (tmp_path / "train.tsv").write_text("sentence1\tsentence2\tlabel\na\tb\tyes\n")
    task = load_task_defs(_task_file(tmp_path, "glue/../train.tsv"))["t"]
    assert len(load_split(task, "train", tmp_path).examples) == 1


def test_a_link_inside_the_root_to_the_environment_is_quoted_by_a_prefix(tmp_path, monkeypatch):
    """The environment reached through a symbolic link placed in the data root (allowed): the message names
    the missing column and quotes at most a bounded prefix of what the file holds."""
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    monkeypatch.setenv("MTDNN_SECRET_FOR_TEST", "x" * 500 + "do-not-print-me")
    environ = Path("/proc/self/environ")
    if not environ.exists():
        pytest.skip("no /proc/self/environ")
    (tmp_path / "env.tsv").symlink_to(environ)
    task = load_task_defs(_task_file(tmp_path, "env.tsv"))["t"]
    with pytest.raises(DataError) as err:
        load_split(task, "train", tmp_path)
    assert "do-not-print-me" not in str(err.value) and len(str(err.value)) < 600


def test_a_huge_header_is_quoted_by_a_prefix(tmp_path):
    """Second input of kind 10: a file whose one line is 200,000 characters (no tab): the column list in the
    message is a bounded prefix."""
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    (tmp_path / "big.tsv").write_text("y" * 200_000 + "SECRET\n")
    task = load_task_defs(_task_file(tmp_path, "big.tsv"))["t"]
    with pytest.raises(DataError, match="column 'sentence1' is not in the file") as err:
        load_split(task, "train", tmp_path)
    assert "SECRET" not in str(err.value) and len(str(err.value)) < 600 and "more characters" in str(err.value)


@pytest.mark.parametrize("fmt,content", [
    ("tsv", "sentence1\tsentence2\tlabel\na\tb\t" + "z" * 100_000 + "SECRET\n"),
    ("jsonl", '{"sentence1": "a", "sentence2": "b", "label": "' + "z" * 100_000 + 'SECRET"}\n'),
    ("jsonl", '{"sentence1": ["' + "z" * 100_000 + 'SECRET"], "sentence2": "b", "label": "no"}\n'),
])
def test_long_values_are_quoted_by_a_prefix(tmp_path, fmt, content):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    (tmp_path / f"train.{fmt}").write_text(content)
    task = load_task_defs(_task_file(tmp_path, f"train.{fmt}", fmt))["t"]
    with pytest.raises(DataError, match="line .*: task 't', field") as err:
        load_split(task, "train", tmp_path)
    assert "SECRET" not in str(err.value) and len(str(err.value)) < 600


def test_conll_and_squad_messages_quote_a_prefix(tmp_path):
    from mtdnn.tasktypes.tagging.conll import read_conll
    from mtdnn.tasktypes.spans.squad import parse_squad

    (tmp_path / "a.conll").write_text("w\tO\n" + "tok " * 50_000 + "SECRET\n")
    with pytest.raises(DataError, match="line 2: task 't': expected 2 fields") as err:
        read_conll(tmp_path / "a.conll", ["token", "tag"], "token", "tag", ["O"], "t")
    assert "SECRET" not in str(err.value) and len(str(err.value)) < 600
    (tmp_path / "b.conll").write_text("w\t" + "B" * 50_000 + "SECRET\n")
    with pytest.raises(DataError, match="field 'tag': tag") as err:
        read_conll(tmp_path / "b.conll", ["token", "tag"], "token", "tag", ["O"], "t")
    assert "SECRET" not in str(err.value)
    document = {"data": [{"title": "T" * 50_000 + "SECRET", "paragraphs": [{"context": "c", "qas": "not a list"}]}]}
    with pytest.raises(DataError, match="field 'qas'") as err:
        parse_squad(document, "s.json", "t")
    assert "SECRET" not in str(err.value) and len(str(err.value)) < 600


def test_predict_json_value_quoted_by_a_prefix(tmp_path):
    from mtdnn.evaluation.predict import read_input

    (tmp_path / "in.jsonl").write_text('{"sentence1": ["' + "q" * 100_000 + 'SECRET"], "sentence2": "b"}\n')
    with pytest.raises(DataError, match="field 'sentence1': expected a string, found an array") as err:
        read_input(str(tmp_path / "in.jsonl"), "auto", _rte_task())
    assert "SECRET" not in str(err.value) and len(str(err.value)) < 600
