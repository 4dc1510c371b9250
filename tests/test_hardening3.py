"""Issue 24 (hardening, round 3): output directories that are not the toolkit's, remote code asked for by a
received run, tracebacks that should be exit 2, training stopped by --max-steps between evaluations, divergence
exit codes, leftovers of a kill. Each example of the issue is a test, with a second input of the same kind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from mtdnn.cli import diagnose, evaluate, predict, train, transfer
from mtdnn.cli import distill as distill_cmd
from mtdnn.cli import teachers as teachers_cmd
from mtdnn.errors import ConfigError

from test_hardening import GLUE, exit_code_and_error, export_dir, tiny_task_file  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def user_dir(path: Path) -> Path:
    """A directory holding a user's files and no run: what must never be emptied."""
    (path / "notes").mkdir(parents=True)
    (path / "thesis.tex").write_text("\\documentclass{article}\n")
    (path / "notes" / "ideas.md").write_text("- multi-task\n")
    return path


def untouched(path: Path) -> bool:
    return (sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
            == ["notes", "notes/ideas.md", "thesis.tex"])


def tiny_train_args(tmp_path, tiny_encoder, out, *extra):
    return [tiny_task_file(tmp_path), "--data-dir", tmp_path, "--encoder", tiny_encoder, "--accelerator", "cpu",
            "--batch-size", "4", "--max-epochs", "1", "--output-dir", out, *extra]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_encoder) -> Path:
    """A complete 1-epoch run of the tiny pair task (3 steps)."""
    base = tmp_path_factory.mktemp("h3run")
    out = base / "run"
    assert train.main([str(a) for a in tiny_train_args(base, tiny_encoder, out)]) == 0
    return out


# ------------------------------------------------------------------------- kind 1: a directory is emptied


def test_train_refuses_a_directory_of_user_files_and_leaves_it_as_it_was(tmp_path, tiny_encoder, capsys):
    target = user_dir(tmp_path / "mine")
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, target), capsys)
    assert code == 2 and f"--output-dir: {target}: the directory holds files that are not this toolkit's" in err
    assert "'notes', 'thesis.tex'" in err and untouched(target)
    # the same with --overwrite: a user's directory is never replaced
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, target, "--overwrite"), capsys)
    assert code == 2 and untouched(target)


def test_a_directory_of_another_kind_is_refused_by_name(tmp_path, tiny_encoder, capsys):
    from mtdnn.fileio import claim_output_dir

    teachers_dir = claim_output_dir(tmp_path / "teachers", "teachers")
    (teachers_dir / "teachers.json").write_text("{}")
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, teachers_dir), capsys)
    assert code == 2 and "is a teacher directory of this toolkit, not a training run directory" in err
    assert (teachers_dir / "teachers.json").is_file()


def test_a_forged_config_yaml_does_not_make_a_directory_a_run(tmp_path, tiny_encoder, capsys):
    target = user_dir(tmp_path / "mine")
    (target / "config.yaml").write_text("resolved:\n  command: train\n")
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, target, "--overwrite"), capsys)
    assert code == 2 and "holds files that are not this toolkit's" in err
    assert sorted(p.name for p in target.iterdir()) == ["config.yaml", "notes", "thesis.tex"]


def test_replacing_a_run_removes_only_what_a_run_writes(tmp_path, tiny_encoder, tiny_run, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "my-notes.txt").write_text("keep me\n")
    (run / "diagnose").mkdir()
    (run / "diagnose" / "diagnose-hans.json").write_text("{}")
    before = (run / "metrics.json").stat().st_mtime_ns
    assert train.main([str(a) for a in tiny_train_args(tmp_path, tiny_encoder, run, "--overwrite")]) == 0
    assert (run / "my-notes.txt").read_text() == "keep me\n" and (run / "diagnose" / "diagnose-hans.json").is_file()
    assert (run / "metrics.json").stat().st_mtime_ns != before


def test_api_flags_are_strict_booleans(tmp_path, tiny_encoder, tiny_run):
    import mtdnn

    config = mtdnn.Run(tiny_run).config
    before = (tiny_run / "metrics.json").read_bytes()
    with pytest.raises(ConfigError, match=r"fit\(\): argument 'overwrite' must be True or False \(got str 'no'\)"):
        mtdnn.fit(config, overwrite="no")
    with pytest.raises(ConfigError, match="argument 'resume' must be True or False"):
        mtdnn.fit(config, resume=1)
    with pytest.raises(ConfigError, match="argument 'overwrite' must be True or False"):
        mtdnn.distill(tmp_path / "student.yaml", overwrite="yes")
    with pytest.raises(ConfigError, match="argument 'retrain_changed' must be True or False"):
        mtdnn.build_teachers(tmp_path / "teachers.yaml", retrain_changed="false")
    assert (tiny_run / "metrics.json").read_bytes() == before


def test_teachers_distill_transfer_and_diagnose_refuse_a_directory_of_user_files(tmp_path, tiny_encoder, tiny_run,
                                                                                  data_dir, capsys):
    target = user_dir(tmp_path / "mine")
    spec = tmp_path / "teachers.yaml"
    spec.write_text(yaml.safe_dump({"task_defs": str(tmp_path / "tiny.yaml"), "from_run": str(tiny_run),
                                    "output_dir": str(target), "tasks": ["tiny"], "members": 1}))
    tiny_task_file(tmp_path)
    code, err = exit_code_and_error(teachers_cmd, [spec, "--data-dir", tmp_path, "--accelerator", "cpu"], capsys)
    assert code == 2 and "holds files that are not this toolkit's" in err and "not a teacher directory" in err
    assert untouched(target)

    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump({"task_defs": str(tmp_path / "tiny.yaml"), "output_dir": str(target),
                                       "gold": ["tiny"], "init": {"encoder": tiny_encoder},
                                       "train": {"max_epochs": 1, "batch_size": 4}}))
    code, err = exit_code_and_error(distill_cmd, [student, "--data-dir", tmp_path, "--accelerator", "cpu"], capsys)
    assert code == 2 and "not a training run directory" in err and untouched(target)

    code, err = exit_code_and_error(transfer, ["--task", "snli", "--task-defs", GLUE, "--encoders", tiny_encoder,
                                               "--data-dir", data_dir, "--sizes", "6", "--seeds", "1",
                                               "--output-dir", target, "--accelerator", "cpu"], capsys)
    assert code == 2 and "not a transfer output directory" in err and untouched(target)

    code, err = exit_code_and_error(diagnose, ["cues", "--task", "rte", "--task-defs", GLUE, "--data-dir", data_dir,
                                               "--output-dir", target], capsys)
    assert code == 2 and "not a diagnose output directory" in err and untouched(target)
    code, err = exit_code_and_error(diagnose, ["hans", "--rule", "word-overlap", "--data-dir", data_dir,
                                               "--output-dir", target], capsys)
    assert code == 2 and "not a diagnose output directory" in err and untouched(target)


def test_the_paired_comparison_refuses_a_directory_of_user_files_before_any_training(tmp_path, tiny_encoder, capsys):
    target = user_dir(tmp_path / "mine")
    tiny_task_file(tmp_path)
    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump({"task_defs": str(tmp_path / "tiny.yaml"), "teachers": str(tmp_path / "t"),
                                       "output_dir": str(tmp_path / "s"), "distill": ["tiny"],
                                       "init": {"encoder": tiny_encoder}, "train": {"max_epochs": 1}}))
    code, err = exit_code_and_error(distill_cmd, [student, "--seeds", "2", "--output-dir", target,
                                                  "--data-dir", tmp_path], capsys)
    assert code == 2 and "not a paired-comparison directory" in err and untouched(target)


# -------------------------------------------------------------------- kind 2: a received run runs its own code


def remote_code_export(export_dir: Path, tmp_path: Path) -> Path:
    import shutil

    received = tmp_path / "received"
    shutil.copytree(export_dir, received)
    config = received / "encoder" / "config.json"
    document = json.loads(config.read_text())
    document["auto_map"] = {"AutoModel": "evil.EvilModel"}
    config.write_text(json.dumps(document))
    (received / "encoder" / "evil.py").write_text("raise SystemExit('remote code ran')\n")
    # an adversary records the changed files' digests too, so that only the remote-code rule can refuse it
    from mtdnn.fileio import file_digest

    meta_path = received / "mtdnn_export.json"
    meta = json.loads(meta_path.read_text())
    if "digests" in meta:
        for name in ("encoder/config.json", "encoder/evil.py"):
            meta["digests"][name] = file_digest(received / name)
        meta_path.write_text(json.dumps(meta))
    return received


def test_an_export_asking_for_remote_code_is_refused_without_the_flag(export_dir, tmp_path, capsys):  # noqa: F811
    import mtdnn

    received = remote_code_export(export_dir, tmp_path)
    code, err = exit_code_and_error(predict, [received, "--text", "a", "b"], capsys)
    assert code == 2 and "asks to run code of its own" in err and "--trust-remote-code" in err
    assert "remote code ran" not in err
    code, err = exit_code_and_error(evaluate, [received, "--split", "dev"], capsys)
    assert code == 2 and "--trust-remote-code" in err
    with pytest.raises(ConfigError, match="asks to run code of its own"):
        mtdnn.load(received)


def test_training_and_transfer_from_a_folder_asking_for_remote_code_exit_2(export_dir, tmp_path, tiny_encoder,  # noqa: F811
                                                                          data_dir, capsys):
    received = remote_code_export(export_dir, tmp_path)
    for flags in (["--encoder", received / "encoder"], ["--init-from", received]):
        args = [tiny_task_file(tmp_path), "--data-dir", tmp_path, "--accelerator", "cpu", "--output-dir",
                tmp_path / "run", *flags]
        code, err = exit_code_and_error(train, args, capsys)
        assert code == 2 and "asks to run code of its own" in err and "--trust-remote-code" in err
        assert "remote code ran" not in err and not (tmp_path / "run").exists()
    code, err = exit_code_and_error(transfer, ["--task", "snli", "--task-defs", GLUE, "--encoders", received,
                                               "--data-dir", data_dir, "--sizes", "6", "--seeds", "1",
                                               "--output-dir", tmp_path / "transfer", "--accelerator", "cpu"], capsys)
    assert code == 2 and "asks to run code of its own" in err and not (tmp_path / "transfer").exists()


def test_a_checkpoint_saying_trust_remote_code_does_not_turn_it_on(tiny_run, tmp_path, capsys):
    import shutil

    import torch

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    best = run / "checkpoints" / "best.ckpt"
    state = torch.load(best, weights_only=True)
    state["hyper_parameters"]["trust_remote_code"] = True
    torch.save(state, best)
    code, err = exit_code_and_error(predict, [run, "--text", "a", "b"], capsys)
    assert code == 2 and f"{best}: the run was trained with trust_remote_code" in err and "--trust-remote-code" in err


def test_a_config_file_cannot_turn_on_remote_code(tiny_run, tmp_path, capsys):
    import mtdnn

    config = yaml.safe_load((tiny_run / "config.yaml").read_text())
    config["trust_remote_code"] = True
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    code, err = exit_code_and_error(train, ["--config", path, "--output-dir", tmp_path / "again"], capsys)
    assert code == 2 and "field 'trust_remote_code' is true" in err and "--trust-remote-code" in err
    assert not (tmp_path / "again").exists()
    with pytest.raises(ConfigError, match="field 'trust_remote_code' is true in the file"):
        mtdnn.fit(path)


# ----------------------------------------------------------------------------- kind 7: tracebacks, exit 2


def test_a_second_training_on_a_locked_directory_is_refused(tmp_path, tiny_encoder, capsys):
    from mtdnn.fileio import DirectoryLock

    out = tmp_path / "run"
    with DirectoryLock(out):
        code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, out), capsys)
    assert code == 2 and f"{out}: another mtdnn process (pid '{os.getpid()}') is writing in this directory" in err
    assert sorted(p.name for p in out.iterdir()) == [".mtdnn.lock"]  # nothing of a run was written


def test_a_lock_is_dropped_by_a_killed_holder(tmp_path):
    import subprocess
    import sys

    from mtdnn.fileio import DirectoryLock

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from mtdnn.fileio import DirectoryLock; "
                               f"DirectoryLock({str(tmp_path)!r}); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(Exception, match="another mtdnn process"):
        DirectoryLock(tmp_path)
    holder.kill()
    holder.wait(timeout=30)
    DirectoryLock(tmp_path).release()  # the kernel dropped the dead process's lock


def test_a_tiny_sampling_temperature_gives_its_limit_not_an_overflow():
    import math

    from mtdnn.tasks.schedule import MultiTaskBatchSampler

    class Task:
        def __init__(self, n):
            self.lengths, self.sampling_weight = [5] * n, 1.0

    for temperature in (1e-6, 1e-300):
        sampler = MultiTaskBatchSampler([Task(100), Task(10)], 4, schedule="temperature", temperature=temperature)
        probabilities = sampler.task_probabilities()
        assert probabilities == [1.0, 0.0] and all(math.isfinite(p) for p in probabilities)
    sampler = MultiTaskBatchSampler([Task(100), Task(10)], 4, schedule="temperature", temperature=2.0)
    assert sampler.task_probabilities() == pytest.approx([10 / (10 + 10 ** 0.5), 10 ** 0.5 / (10 + 10 ** 0.5)])


def test_pad_to_multiple_beyond_the_encoder_positions_exits_2(tmp_path, tiny_encoder, capsys):
    out = tmp_path / "run"
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, out, "--pad-to-multiple-of",
                                                           "1000"), capsys)
    assert code == 2 and "--pad-to-multiple-of 1000: pads rows of up to 128 tokens to 1000, beyond the encoder's" in err
    assert not out.exists()


@pytest.mark.parametrize("name, why", [("rte.v2", "e.g. 'rte_v2'"), ("keys", "reserved"),
                                       ("training", "reserved"), ("a b", "e.g. 'a_b'"), ("é", "e.g. 'task'"),
                                       ("x" * 300, "e.g. '" + "x" * 64 + "'")])
def test_task_names_that_cannot_key_a_head_exit_2(tmp_path, tiny_encoder, capsys, name, why):
    task_file = tiny_task_file(tmp_path)
    task_file.write_text(task_file.read_text().replace("  tiny:", f"  {json.dumps(name)}:"))
    code, err = exit_code_and_error(train, [task_file, "--data-dir", tmp_path, "--encoder", tiny_encoder,
                                            "--output-dir", tmp_path / "run"], capsys)
    assert code == 2 and f"{task_file}: task " in err and why in err and not (tmp_path / "run").exists()


def test_output_names_over_255_bytes_exit_2(tmp_path, tiny_encoder, export_dir, capsys):  # noqa: F811
    long = "x" * 256
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, tmp_path / long), capsys)
    assert code == 2 and "a name of 256 bytes; file systems allow at most 255 bytes per name" in err
    code, err = exit_code_and_error(predict, [export_dir, "--text", "a", "b", "--output", tmp_path / ("é" * 128)],
                                    capsys)
    assert code == 2 and "a name of 256 bytes" in err


def test_default_run_names_of_many_tasks_stay_within_255_bytes():
    from mtdnn.training.resolve import default_output_dir

    tasks = [f"task_number_{i:03d}" for i in range(100)]
    name = default_output_dir("task_defs/glue.yaml", tasks, 42).name
    other = default_output_dir("task_defs/glue.yaml", tasks[:-1] + ["another"], 42).name
    assert len(name.encode()) <= 255 and name.endswith("-seed42") and "-and-100-tasks-" in name and name != other


def test_api_calls_with_wrong_types_or_values_raise_config_errors(export_dir, tmp_path):  # noqa: F811
    import mtdnn

    with pytest.raises(ConfigError, match=r"load\(path\): expected a run or export directory .* \(got int 123\)"):
        mtdnn.load(123)
    with pytest.raises(ConfigError, match=r"argument 'trust_remote_code' must be True or False"):
        mtdnn.load(export_dir, trust_remote_code="yes")
    model = mtdnn.load(export_dir)
    with pytest.raises(ConfigError, match="batch size: expected a positive integer"):
        model.predict([("a", "b")], task="rte", batch_size=-1)
    with pytest.raises(ConfigError, match="batch size: expected a positive integer"):
        model.predict([("a", "b")], task="rte", batch_size=2.5)
    with pytest.raises(ConfigError, match=r"teacher spec: expected a TeacherSpec or the path of its YAML file "
                                          r"\(got NoneType None\)"):
        mtdnn.build_teachers(None)
    with pytest.raises(ConfigError, match=r"transfer\(spec\): expected a TransferSpec, or its fields as keywords"):
        mtdnn.transfer("snli")


def test_a_full_disk_inside_safetensors_is_exit_2_and_leaves_no_export(tmp_path, tiny_encoder, monkeypatch):
    from safetensors import SafetensorError

    from mtdnn.errors import UserError
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training import export

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    monkeypatch.setattr(export, "save_file", full)
    tasks = select_tasks(load_task_defs(GLUE), ["rte"], GLUE)
    out = tmp_path / "run" / "export"
    with pytest.raises(UserError, match=r"cannot write the export \(Error while serializing: .*No space left"):
        export.export_model(MultiTaskModel(load_encoder(tiny_encoder), tasks), load_tokenizer(tiny_encoder), tasks,
                            out, source_encoder=tiny_encoder)
    assert list((tmp_path / "run").iterdir()) == []


# ------------------------------------------------------- kind 8: stopped by --max-steps, divergence exit codes


def test_max_steps_between_evaluations_evaluates_at_the_stop(tmp_path, tiny_encoder):
    out = tmp_path / "run"
    # 12 rows in batches of 2: 6 steps an epoch; --max-steps 2 stops mid-epoch
    args = tiny_train_args(tmp_path, tiny_encoder, out, "--batch-size", "2", "--max-steps", "2")
    assert train.main([str(a) for a in args]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "complete" and len(metrics["epochs"]) == 1
    assert metrics["best"]["step"] == 2 and (out / "export" / "heads.safetensors").is_file()
    # with --eval-every-n-steps 3 and --max-steps 4: evaluations at steps 3 and 4
    out2 = tmp_path / "run2"
    args = tiny_train_args(tmp_path, tiny_encoder, out2, "--batch-size", "2", "--max-steps", "4",
                           "--eval-every-n-steps", "3")
    assert train.main([str(a) for a in args]) == 0
    assert [e["step"] for e in json.loads((out2 / "metrics.json").read_text())["epochs"]] == [3, 4]


def test_every_divergence_is_exit_3(tmp_path, tiny_encoder, capsys):
    out = tmp_path / "run"
    code, err = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, out, "--weight-decay", "1e300"),
                                    capsys)
    assert code == 3 and "training diverged" in err and not (out / "metrics.json").exists()


# ------------------------------------------------------------------------------- kind 9: leftovers after a kill


def test_resume_removes_temporaries_of_a_killed_run(tmp_path, tiny_encoder, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "1")
    code, _ = exit_code_and_error(train, tiny_train_args(tmp_path, tiny_encoder, out), capsys)
    assert code == 143 and (out / "checkpoints" / "last.ckpt").is_file()
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    leftovers = [out / ".export.99999999.abcdefgh", out / "metrics.json.99999999.k2j3h4g5.tmp",
                 out / "checkpoints" / "last.ckpt.99999999.partial.tmp"]
    leftovers[0].mkdir()
    (leftovers[0] / "heads.safetensors").write_bytes(b"partial")
    for path in leftovers[1:]:
        path.write_text("partial")
    kept = [out / "keep.me.tmp", out / "metrics.json.a1b2c3d4.tmp", out / "notes.123.backup1.tmp"]
    for path in kept:  # not of the toolkit's naming: no process id, or not a name a run writes
        path.write_text("a user's file")
    assert train.main([str(a) for a in tiny_train_args(tmp_path, tiny_encoder, out, "--resume")]) == 0
    assert not any(p.exists() for p in leftovers) and all(p.is_file() for p in kept)


def test_predict_removes_temporaries_of_dead_processes_only(export_dir, tmp_path, capsys):  # noqa: F811
    output = tmp_path / "out.tsv"
    dead = tmp_path / "out.tsv.99999999.abcdefgh.tmp"
    live = tmp_path / f"out.tsv.{os.getpid()}.abcdefgh.tmp"
    other = tmp_path / "other.tsv.99999999.abcdefgh.tmp"
    for path in (dead, live, other):
        path.write_text("partial")
    assert predict.main([str(export_dir), "--text", "a", "b", "--output", str(output)]) == 0
    assert output.is_file() and not dead.exists() and live.exists() and other.exists()


def test_a_teacher_rerun_removes_soft_target_temporaries_and_nothing_else(tmp_path):
    from mtdnn.distillation.teachers import _teacher_entry
    from mtdnn.fileio import remove_stale_temporaries

    logits = tmp_path / "teachers" / "rte" / "logits"
    logits.mkdir(parents=True)
    (logits / "member-1-train").mkdir()
    stale = [logits / ".member-1-dev.99999999.abcdefgh", logits / ".member-1-train.12345.replaced",
             tmp_path / "teachers" / "teachers.json.4242.abcdefgh.tmp"]
    kept = [logits / ".member-2-dev.qwertyui",  # no process id: not a temporary of this toolkit
            tmp_path / "teachers" / ".notes.12345.archive", tmp_path / "teachers" / "draft.12.backup1.tmp"]
    for path in stale + kept:
        path.mkdir() if not path.name.endswith(".tmp") else path.write_text("x")
    removed = remove_stale_temporaries(tmp_path / "teachers", _teacher_entry, locked=True, recursive=True)
    assert sorted(removed) == sorted(stale) and all(p.exists() for p in kept) and (logits / "member-1-train").is_dir()


def test_cleanup_keeps_user_files_of_similar_names_and_never_follows_a_link(tmp_path):
    from mtdnn.training.runs import lock_run_dir

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (run / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    user = [run / "draft.backup.tmp", run / "metrics.json.user_copy.tmp", run / ".notes.archive",
            run / ".cache.mydata1", elsewhere / "last.ckpt.99999999.partial.tmp", elsewhere / "paper.abcdefgh.tmp"]
    for path in user:
        path.mkdir() if path.name.startswith(".") else path.write_text("mine")
    ours = run / "metrics.json.99999999.abcdefgh.tmp"
    ours.write_text("partial")
    lock_run_dir(run).release()
    assert all(p.exists() for p in user) and not ours.exists()
