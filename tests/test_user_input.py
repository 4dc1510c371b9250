"""Bad input found by trying the toolkit as a new user: each is a clear error (exit 2), before anything is written."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

import mtdnn
from mtdnn import train
from mtdnn.cli import diagnose, evaluate, transfer
from mtdnn.errors import ConfigError, run_cli

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir, tiny_encoder):
    """A complete 1-epoch RTE run of the tiny encoder whose dev scores cover 32 examples."""
    path = tmp_path_factory.mktemp("runs") / "rte"
    assert train.main([GLUE, "--tasks", "rte", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                       "--limit-train-examples", "32", "--limit-eval-examples", "32", "--batch-size", "16",
                       "--max-epochs", "1", "--accelerator", "cpu", "--output-dir", str(path)]) == 0
    return path


def exit_code(main, argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        run_cli(main, argv)
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--seed", "-1"], "--seed: Input should be greater than or equal to 0"),
    (["--data-seed", "4294967296"], "--data-seed: Input should be less than or equal to 4294967295"),
    (["--compile", "nosuchbackend"], "--compile nosuchbackend: not a torch.compile backend here"),
    (["--devices", "99", "--accelerator", "cpu"], "--devices 99: on the CPU each device is a process"),
])
def test_bad_training_flags_exit_2_before_the_run_directory(tmp_path, data_dir, tiny_encoder, capsys, flags, message):
    out = tmp_path / "run"
    code, err = exit_code(train.main, [GLUE, "--tasks", "rte", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                                       "--output-dir", str(out), *flags], capsys)
    assert code == 2 and message in err, err
    assert not out.exists()


def test_a_bad_compile_backend_leaves_a_complete_run_untouched_with_overwrite(tiny_run, tmp_path, data_dir,
                                                                              tiny_encoder, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    code, err = exit_code(train.main, [GLUE, "--tasks", "rte", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                                       "--output-dir", str(copy), "--overwrite", "--compile", "nosuch"], capsys)
    assert code == 2 and "--compile nosuch" in err
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before


def test_train_config_and_fit_raise_the_toolkits_error_type():
    with pytest.raises(ConfigError, match="TrainConfig: field 'lr': Input should be greater than 0"):
        mtdnn.TrainConfig(task_defs=GLUE, lr=-1)
    with pytest.raises(ConfigError, match="field 'surprise': Extra inputs"):
        mtdnn.TrainConfig(task_defs=GLUE, surprise=1)
    with pytest.raises(ConfigError, match=r"fit\(config\): expected a TrainConfig.*\(got int\)"):
        mtdnn.fit(5)


@pytest.mark.parametrize("device, message", [("banana", "--device banana: not a device"),
                                             ("cuda:7", "--device cuda:7: this machine has")])
def test_evaluate_refuses_a_device_it_cannot_use(tiny_run, tmp_path, capsys, device, message):
    code, err = exit_code(evaluate.main, [str(tiny_run), "--device", device, "--output", str(tmp_path / "e.json")],
                          capsys)
    assert code == 2 and message in err, err
    assert not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("field, value", [("eval_batch_size", -3), ("max_length", "lots"), ("pad_to_multiple_of", 0)])
def test_evaluate_checks_the_runs_config_yaml(tiny_run, tmp_path, capsys, field, value):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config[field] = value
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    code, err = exit_code(evaluate.main, [str(copy), "--output", str(tmp_path / "e.json")], capsys)
    assert code == 2 and f"config.yaml: field '{field}'" in err, err


def test_evaluate_says_when_the_run_scored_fewer_dev_examples(tiny_run, tmp_path, caplog):
    with caplog.at_level("WARNING"):
        assert evaluate.main([str(tiny_run), "--output", str(tmp_path / "e.json")]) == 0
    assert "--limit-eval-examples 32" in caplog.text
    assert json.loads((tmp_path / "e.json").read_text())["examples"]["rte"] == 277  # the whole dev split


def test_report_checks_partial_input_files_before_writing(tiny_run, tmp_path, capsys):
    bad = tmp_path / "not-a-result.json"
    bad.write_text(json.dumps({"task": "rte"}))
    out = tmp_path / "report"
    code, err = exit_code(diagnose.main, ["report", str(tiny_run), "--partial-input", str(bad),
                                          "--output-dir", str(out)], capsys)
    assert code == 2 and "not a result of python -m mtdnn.diagnose partial-input" in err, err
    assert not out.exists()


def test_partial_input_refuses_negative_seeds_before_writing(tmp_path, capsys):
    out = tmp_path / "partial"
    code, err = exit_code(diagnose.main, ["partial-input", "--task", "rte", "--input", "hypothesis", "--seeds", "-1",
                                          "--output-dir", str(out)], capsys)
    assert code == 2 and "--seeds: each seed must be from 0" in err, err
    assert not out.exists()


def test_transfer_default_task_definitions_are_found_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no task_defs/ here: the repository's glue.yaml is used
    code, err = exit_code(transfer.main, ["--task", "nosuchtask", "--encoders", "packaged-minilm", "--sizes", "10"],
                          capsys)
    assert code == 2 and "nosuchtask" in err and "cannot read" not in err, err


def test_flipped_bytes_inside_a_checkpoint_are_refused_not_loaded(tiny_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    ckpt = copy / "checkpoints" / "best.ckpt"
    data = bytearray(ckpt.read_bytes())
    middle = len(data) // 2  # inside a tensor's record: torch.load alone would read it as other weights
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    ckpt.write_bytes(bytes(data))
    code, err = exit_code(evaluate.main, [str(copy), "--output", str(tmp_path / "e.json")], capsys)
    assert code == 2 and "does not match its CRC-32" in err and str(ckpt) in err, err
    assert not (tmp_path / "e.json").exists()


def test_a_row_that_is_not_utf8_is_named_by_its_line(tmp_path, data_dir, tiny_encoder, capsys):
    rte = tmp_path / "data" / "glue" / "RTE"
    rte.mkdir(parents=True)
    lines = (data_dir / "glue" / "RTE" / "train.tsv").read_bytes().splitlines(keepends=True)[:50]
    (rte / "train.tsv").write_bytes(b"".join(lines) + b"9999\tA caf\xe9 sentence.\tAnother.\tentailment\n")
    (rte / "dev.tsv").write_bytes((data_dir / "glue" / "RTE" / "dev.tsv").read_bytes())
    code, err = exit_code(train.main, [GLUE, "--tasks", "rte", "--data-dir", str(tmp_path / "data"), "--encoder",
                                       tiny_encoder, "--output-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and "train.tsv: not valid utf-8-sig text at line 51, byte 11 of the line" in err, err
    assert not (tmp_path / "run").exists()


def test_transfer_refuses_a_size_listed_twice(capsys):
    code, err = exit_code(transfer.main, ["--task", "snli", "--encoders", "packaged-minilm", "--sizes", "10,10"], capsys)
    assert code == 2 and "a size is listed twice" in err, err
