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
from mtdnn.errors import CheckpointError, ConfigError, DataError, UserError, run_cli

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
    from mtdnn.tasks.data import tokenized_split
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
