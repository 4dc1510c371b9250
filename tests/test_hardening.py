"""The examples of the hardening issue, each as a test: exit code 2, a message naming the file, field or flag,
and nothing written (or nothing marked complete)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from mtdnn.cli import distill as student
from mtdnn.cli import predict
from mtdnn.cli import train
from mtdnn.errors import ConfigError, run_cli

from test_fileio import unwritable_dir

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def exit_code_and_error(command, args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(command.main, [str(a) for a in args])
    return exit_info.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, tiny_encoder) -> Path:
    """An export of the tiny encoder with an untrained rte head (no training needed)."""
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.export import export_model

    tasks = select_tasks(load_task_defs(GLUE), ["rte"], GLUE)
    model = MultiTaskModel(load_encoder(tiny_encoder), tasks)
    path = tmp_path_factory.mktemp("export") / "export"
    return export_model(model, load_tokenizer(tiny_encoder), tasks, path, source_encoder=tiny_encoder)


def tiny_task_file(tmp_path: Path, rows: int = 12) -> Path:
    """A pair-classification task over a small TSV written to ``tmp_path``."""
    lines = ["sentence1\tsentence2\tlabel"] + [
        f"premise number {i} with a few more words\thypothesis {i} and words\t{'yes' if i % 2 else 'no'}"
        for i in range(rows)]
    (tmp_path / "tiny.tsv").write_text("\n".join(lines) + "\n")
    path = tmp_path / "tiny.yaml"
    path.write_text("tasks:\n  tiny:\n    type: classification\n    splits:\n      train: {path: tiny.tsv}\n"
                    "      dev: {path: tiny.tsv}\n    text: [sentence1, sentence2]\n    label: label\n"
                    "    labels: ['no', 'yes']\n")
    return path


# ------------------------------------------------------------------------------------- 1. damaged files


def test_predict_with_a_truncated_heads_file_exits_2_naming_it(export_dir, tmp_path, capsys):
    damaged = tmp_path / "export"
    shutil.copytree(export_dir, damaged)
    heads = damaged / "heads.safetensors"
    heads.write_bytes(heads.read_bytes()[: heads.stat().st_size // 2])
    code, err = exit_code_and_error(predict, [damaged, "--task", "rte", "--text", "a", "b"], capsys)
    assert code == 2 and f"{heads}: cannot read the weights" in err and "Traceback" not in err


def test_predict_with_a_damaged_tasks_yaml_exits_2_naming_it(export_dir, tmp_path, capsys):
    damaged = tmp_path / "export"
    shutil.copytree(export_dir, damaged)
    (damaged / "tasks.yaml").write_text("tasks:\n  rte: [unclosed\n")
    code, err = exit_code_and_error(predict, [damaged, "--task", "rte", "--text", "a", "b"], capsys)
    assert code == 2 and f"{damaged / 'tasks.yaml'}: line" in err


def test_distill_with_a_teacher_spec_as_manifest_exits_2(tmp_path, capsys):
    teachers = tmp_path / "teachers"
    teachers.mkdir()
    shutil.copy(ROOT / "teachers" / "glue.yaml", teachers / "teachers.yaml")  # a spec, not a build manifest
    spec = tmp_path / "student.yaml"
    spec.write_text(f"task_defs: {GLUE}\nteachers: {teachers}\noutput_dir: {tmp_path / 'student'}\n"
                    "distill: [rte]\n")
    code, err = exit_code_and_error(student, [spec, "--accelerator", "cpu"], capsys)
    assert code == 2 and f"{teachers / 'teachers.yaml'}: not a teacher build manifest" in err
    assert not (tmp_path / "student").exists()


# --------------------------------------------------------------------------------- 2. unwritable output


def test_train_into_an_unwritable_location_exits_2_leaving_nothing(tmp_path, tiny_encoder, capsys):
    locked = unwritable_dir(tmp_path)
    before = sorted(locked.iterdir()) if locked == tmp_path / "read-only" else None
    task_file = tiny_task_file(tmp_path)
    code, err = exit_code_and_error(train, [task_file, "--data-dir", tmp_path, "--encoder", tiny_encoder,
                                            "--accelerator", "cpu", "--output-dir", locked / "run"], capsys)
    assert code == 2 and f"--output-dir: {locked / 'run'}: cannot write in {locked}" in err
    assert not (locked / "run").exists() and (before is None or sorted(locked.iterdir()) == before)
    a_file = tmp_path / "tiny.tsv"
    code, err = exit_code_and_error(train, [task_file, "--data-dir", tmp_path, "--encoder", tiny_encoder,
                                            "--accelerator", "cpu", "--output-dir", a_file / "run"], capsys)
    assert code == 2 and "is not a directory" in err


def test_predict_and_evaluate_refuse_an_unwritable_output_before_work(export_dir, tmp_path, capsys):
    from mtdnn.cli import evaluate

    locked = unwritable_dir(tmp_path)
    code, err = exit_code_and_error(predict, [export_dir, "--task", "rte", "--text", "a", "b",
                                              "--output", locked / "out.tsv"], capsys)
    assert code == 2 and f"--output: {locked / 'out.tsv'}: cannot write in" in err
    code, err = exit_code_and_error(evaluate, [export_dir, "--output", locked / "eval.json"], capsys)
    assert code == 2 and "cannot write in" in err


# ------------------------------------------------------------------------ 3 and 5. duplicate keys, aliases


def test_train_refuses_a_task_defined_twice_naming_both_lines(tmp_path, capsys):
    task_file = tiny_task_file(tmp_path)
    text = task_file.read_text()
    second = text.split("\n", 1)[1].replace("classification", "regression").replace("    labels: ['no', 'yes']\n", "")
    task_file.write_text(text + second)  # tiny: again, as a regression task: the second would win
    code, err = exit_code_and_error(train, [task_file, "--data-dir", tmp_path, "--output-dir", tmp_path / "run"],
                                    capsys)
    assert code == 2 and f"{task_file}: line 10: key 'tiny' is repeated (first on line 2, again on line 10)" in err
    assert not (tmp_path / "run").exists()


def test_billion_laughs_is_refused_at_once(tmp_path, capsys):
    task_file = tmp_path / "laughs.yaml"
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    task_file.write_text("\n".join(levels) + "\ntasks:\n  rte:\n    text: *a8\n")
    start = time.perf_counter()
    code, err = exit_code_and_error(train, [task_file, "--output-dir", tmp_path / "run"], capsys)
    assert time.perf_counter() - start < 5
    assert code == 2 and f"{task_file}: line 1: anchor &a0 is not allowed" in err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- 4. non-finite numbers (input)


@pytest.mark.parametrize("flag,value", [("--lr", "inf"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "5"),
                                        ("--weight-decay", "-inf"), ("--warmup-ratio", "1"),
                                        ("--gradient-clip", "inf"), ("--temperature", "nan"), ("--dropout", "1"),
                                        ("--max-length", "2"), ("--max-length", "100000")])
def test_train_refuses_non_finite_and_out_of_range_flags(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([GLUE, "--tasks", "rte", f"{flag}={value}", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"argument {flag}: must be" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field,value", [("lr", ".inf"), ("lr", ".nan"), ("weight_decay", ".inf"),
                                         ("gradient_clip", "-.inf"), ("max_length", "2")])
def test_teacher_spec_refuses_non_finite_and_out_of_range_fields(field, value, tmp_path):
    from mtdnn.distillation.specs import TeacherSpec, load_spec

    path = tmp_path / "teachers.yaml"
    path.write_text(f"task_defs: {GLUE}\noutput_dir: out\ntasks: [rte]\nfinetune:\n  {field}: {value}\n")
    with pytest.raises(ConfigError, match=f"{path}: field 'finetune.{field}'"):
        load_spec(path, TeacherSpec, "teacher")


@pytest.mark.parametrize("field,value", [("temperature", ".inf"), ("alpha", ".nan"), ("loss_weights", "{rte: .inf}")])
def test_student_spec_refuses_non_finite_fields(field, value, tmp_path):
    from mtdnn.distillation.specs import load_spec
    from mtdnn.distillation.student import StudentSpec

    path = tmp_path / "student.yaml"
    path.write_text(f"task_defs: {GLUE}\noutput_dir: out\ndistill: [rte]\n{field}: {value}\n")
    with pytest.raises(ConfigError, match=f"{path}: field '{field}"):
        load_spec(path, StudentSpec, "student")


def test_task_definition_refuses_non_finite_weights(tmp_path):
    from mtdnn.tasks.taskdef import load_task_defs

    path = tiny_task_file(tmp_path)
    path.write_text(path.read_text() + "    loss_weight: .inf\n")
    with pytest.raises(ConfigError, match="task 'tiny': field 'loss_weight'"):
        load_task_defs(path)


# --------------------------------------------------------------------------- 8. max length below truncation


def test_max_length_too_short_for_the_tokenizer_is_refused_before_any_file(tmp_path, tiny_encoder, capsys):
    from mtdnn.modeling.model import load_tokenizer
    from mtdnn.tasks.tokenized import check_max_length
    from mtdnn.tasks.taskdef import load_task_defs

    task = load_task_defs(tiny_task_file(tmp_path))["tiny"]
    tokenizer = load_tokenizer(tiny_encoder)
    check_max_length(task, tokenizer, 8, "--max-length")  # the smallest valid value passes
    with pytest.raises(ConfigError, match="--max-length: max length 4 is too short for task 'tiny'.*at least 5"):
        check_max_length(task, tokenizer, 4, "--max-length")
    task_file = tmp_path / "tiny.yaml"
    task_file.write_text(task_file.read_text() + "    max_length: 2\n")
    code, err = exit_code_and_error(train, [task_file, "--data-dir", tmp_path, "--encoder", tiny_encoder,
                                            "--output-dir", tmp_path / "run"], capsys)
    assert code == 2 and "task 'tiny': field 'max_length'" in err and not (tmp_path / "run").exists()


# -------------------------------------------------------------------------------- 9. tokenized-split cache


def test_cache_key_ignores_leftover_truncation_state(tmp_path, tokenizer, monkeypatch):
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.tasks.taskdef import load_task_defs

    monkeypatch.setenv("MTDNN_CACHE_DIR", str(tmp_path / "cache"))
    task = load_task_defs(tiny_task_file(tmp_path))["tiny"]
    lengths = [max(tokenized_split(task, "train", tmp_path, tokenizer, n).lengths) for n in (32, 64, 32)]
    assert lengths[0] == lengths[2] <= 32
    entries = sorted(p.name for p in (tmp_path / "cache" / "tokenized").iterdir())
    assert len(entries) == 2, entries  # one for 32 (reused by the second call), one for 64


# -------------------------------------------------------------------- 4. a diverged run is never complete


def test_a_diverged_run_is_refused_by_the_run_writer():
    import torch

    from mtdnn.errors import Diverged
    from mtdnn.training.runs import check_finite_run

    good = {"w": torch.ones(3), "step": torch.tensor(3)}
    check_finite_run(good, [{"epoch": 1, "average": 0.5}], "best.ckpt")
    with pytest.raises(Diverged, match=r"best.ckpt: training diverged: 1 of 2 weight tensors hold NaN") as err:
        check_finite_run({**good, "w": torch.tensor([1.0, float("nan")])}, [], "best.ckpt")
    assert err.value.exit_code == 3
    with pytest.raises(Diverged, match=r"dev average of epoch\(s\) \[2\] is not a finite number"):
        check_finite_run(good, [{"epoch": 1, "average": 0.5}, {"epoch": 2, "average": float("nan")}], "best.ckpt")


# ---------------------------------------------------------------------------- 6. resume with other settings


def test_resume_refuses_other_data_and_settings_by_name(tmp_path, tiny_encoder, monkeypatch, capsys):
    import yaml

    task_file = tiny_task_file(tmp_path, rows=24)
    shuffled, moved = tmp_path / "shuffled", tmp_path / "moved"
    lines = (tmp_path / "tiny.tsv").read_text().splitlines()
    for directory, rows in ((shuffled, [lines[0]] + lines[:0:-1]), (moved, lines)):
        directory.mkdir()
        (directory / "tiny.tsv").write_text("\n".join(rows) + "\n")
    run = tmp_path / "run"
    args = [task_file, "--encoder", tiny_encoder, "--batch-size", "8", "--max-epochs", "1", "--accelerator", "cpu",
            "--output-dir", run]
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "2")
    assert train.main([str(a) for a in [*args, "--data-dir", tmp_path]]) == 143
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    summary = capsys.readouterr().err  # printed before the first step
    assert "training tiny (24 train, 24 dev)" in summary
    assert "3 optimizer steps per epoch x 1 epochs = 3 steps" in summary
    assert "device: cpu x 1" in summary and "precision 32-true" in summary

    code, err = exit_code_and_error(train, [*args, "--data-dir", shuffled, "--resume"], capsys)
    assert code == 2 and "data_fingerprint.tiny.train: now" in err and "data_fingerprint.tiny.dev" in err
    code, err = exit_code_and_error(train, [*args, "--data-dir", tmp_path, "--resume", "--lr", "1e-4",
                                            "--seed", "7"], capsys)
    assert code == 2 and "--lr: now 0.0001, the interrupted run used 5e-05" in err and "--seed: now 7" in err
    assert not (run / "metrics.json").exists()

    # the same rows elsewhere: resumed, and config.yaml records where the data now lies
    assert train.main([str(a) for a in [*args, "--data-dir", moved, "--resume"]]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["data_dir"] == str(moved)


# ---------------------------------------------------------------- 7. DDP with more ranks than dev batches


def test_ddp_with_more_ranks_than_dev_batches_finishes(tmp_path, tiny_encoder):
    """Two gloo processes, one dev batch (12 rows, --eval-batch-size 512): both ranks reach every collective, and
    the dev scores equal one process's (the padding batch counts for nothing)."""
    import json
    import os
    import subprocess
    import sys

    task_file = tiny_task_file(tmp_path)
    common = [str(task_file), "--data-dir", str(tmp_path), "--encoder", tiny_encoder, "--batch-size", "4",
              "--eval-batch-size", "512", "--max-epochs", "2", "--dropout", "0", "--accelerator", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mtdnn.train", *common, "--devices", "2", "--strategy", "ddp",
           "--output-dir", str(tmp_path / "ddp")]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert train.main([*common, "--devices", "1", "--output-dir", str(tmp_path / "single")]) == 0
    ddp, single = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("ddp", "single"))
    assert ddp["status"] == "complete" and len(ddp["epochs"]) == 2
    for a, b in zip(ddp["epochs"], single["epochs"]):
        assert a["tasks"]["tiny"]["accuracy"] == pytest.approx(b["tasks"]["tiny"]["accuracy"], abs=1e-6)


# ------------------------------------------------------------------------------------------ new-user items


def test_glue_submission_clips_stsb_scores_to_0_5():
    from mtdnn.evaluation.predict import format_predictions
    from mtdnn.tasks.taskdef import load_task_defs

    stsb = load_task_defs(GLUE)["stsb"]
    text = format_predictions(stsb, ["0", "1", "2"], [{"prediction": -0.4}, {"prediction": 2.5},
                                                      {"prediction": 5.7}], "glue")
    assert text == "index\tprediction\n0\t0.000\n1\t2.500\n2\t5.000\n"
    jsonl = format_predictions(stsb, ["0"], [{"prediction": 5.7}], "jsonl")
    assert '"prediction": 5.7' in jsonl  # only the submission file is clipped


def test_evaluate_table_marks_the_averaged_metric():
    from mtdnn.evaluation.evaluate import format_table

    table = format_table({"cola": {"accuracy": 0.7, "mcc": 0.2}}, {"cola": 100}, "dev", 0.2,
                         {"cola": ["mcc", "accuracy"]})
    assert "*mcc 0.2000  accuracy 0.7000" in table and table.endswith("average of the * metrics: 0.2000")


def test_predict_says_what_it_scores(export_dir, capsys):
    assert predict.main([str(export_dir), "--task", "rte", "--text", "a", "b"]) == 0
    assert "rte input: 1 examples in 1 batches on cpu" in capsys.readouterr().err


def test_limited_runs_get_their_own_directory_and_are_named_when_used(tmp_path, caplog):
    from mtdnn.distillation.teachers import warn_if_limited
    from mtdnn.fileio import write_yaml_atomic
    from mtdnn.training.resolve import default_output_dir

    assert str(default_output_dir("task_defs/glue.yaml", ["rte", "mrpc"], 42)) == "runs/glue-rte-mrpc-seed42"
    assert str(default_output_dir("glue.yaml", ["rte"], 42, 100)) == "runs/glue-rte-seed42-limited-train100"
    limited = default_output_dir("glue.yaml", ["rte"], 1, 100, 50)
    assert str(limited) == "runs/glue-rte-seed1-limited-train100-dev50"
    # config.yaml as written now (the TrainConfig's fields at the top) and as written before (flags under args)
    for config in ({"task_defs": "glue.yaml", "limit_train_examples": 100, "limit_eval_examples": None,
                    "resolved": {"command": "train"}},
                   {"command": "train", "args": {"limit_train_examples": 100, "limit_eval_examples": None}}):
        write_yaml_atomic(tmp_path / "config.yaml", config)
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert warn_if_limited(tmp_path, "the teachers start") == {"limit_train_examples": 100}
        assert "a LIMITED run (--limit-train-examples 100)" in caplog.text


def test_help_shows_each_default_once_and_no_backticks():
    import re

    from mtdnn.cli import diagnose, evaluate, teachers, transfer

    for module in (train, evaluate, predict, teachers, student, transfer, diagnose):
        text = module.build_parser().format_help()
        assert "``" not in text, module.__name__
        for chunk in re.split(r"\n  (?=-)", text):  # one chunk per option
            assert chunk.count("(default") <= 1 and not re.search(r"default.*\(default: ", chunk, re.S), chunk
    assert "(default: 5e-05)" in train.build_parser().format_help()


def test_export_files_get_the_umask_permissions(export_dir):
    from mtdnn.fileio import default_mode

    modes = {p.name: p.stat().st_mode & 0o777 for p in export_dir.rglob("*") if p.is_file()}
    assert modes["heads.safetensors"] == modes["model.safetensors"] == modes["tasks.yaml"] == default_mode()
