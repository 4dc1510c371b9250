"""Scale-out correctness: 2-process DDP equals 1 process, and an interrupted run resumes exactly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mtdnn.errors import run_cli
from mtdnn.train import main

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def args_for(run_dir, data_dir, encoder, *extra):
    return [GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", encoder,
            "--limit-train-examples", "40", "--batch-size", "15", "--max-epochs", "2", "--accelerator", "cpu",
            "--keep-last-checkpoint", "--output-dir", str(run_dir), *extra]


def weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def assert_same_weights(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=atol, rtol=0), key


def assert_same_metrics(a: Path, b: Path, atol: float) -> None:
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert len(ma["epochs"]) == len(mb["epochs"])
    for ea, eb in zip(ma["epochs"], mb["epochs"]):
        for task, scores in ea["tasks"].items():
            for name, value in scores.items():
                assert value == pytest.approx(eb["tasks"][task][name], abs=atol), (task, name)
    assert ma["best"]["epoch"] == mb["best"]["epoch"]


def logged_rows(run_dir: Path) -> list[tuple]:
    """``(epoch, step, logged metric names)`` of every row of the run's logs/metrics.csv."""
    import csv

    with (run_dir / "logs" / "metrics.csv").open(newline="") as f:
        return [(r["epoch"], r["step"], tuple(sorted(k for k, v in r.items() if v))) for r in csv.DictReader(f)]


def read_trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# Gradient accumulation 2 with dev evaluation every 2 optimizer steps: each epoch has 6 batches = 3 steps.
STEP_FEATURES = ("--accumulate-grad-batches", "2", "--eval-every-n-steps", "2")


@pytest.mark.parametrize("features", [(), STEP_FEATURES], ids=["plain", "accumulate2-eval2"])
def test_ddp_two_processes_equal_one(tmp_path, data_dir, tiny_encoder, monkeypatch, features):
    ddp_run, single_run = tmp_path / "ddp", tmp_path / "single"
    env = {**os.environ, "MTDNN_TRACE_DIR": str(tmp_path / "trace-ddp"), "OMP_NUM_THREADS": "1",
           "MTDNN_DATA_DIR": str(data_dir), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "plugins")])}
    # Classification tasks: a tiny random encoder's STS-B scores are nearly constant, so its Pearson moves by
    # 1e-6 with the 1e-8 float noise of a different gradient summation order; counts do not. RTE and MRPC have
    # glue.yaml's SAN head, with its random step dropout off (as --dropout 0 turns the other dropout off): each
    # rank draws from its own generator, so no random mask is the same on two ranks as on one process.
    doc = yaml.safe_load(Path(GLUE).read_text())
    for name in ("rte", "mrpc"):
        assert doc["tasks"][name]["head"]["type"] == "san"
        doc["tasks"][name]["head"]["step_dropout"] = 0.0
    defs = tmp_path / "glue-san-no-step-dropout.yaml"
    defs.write_text(yaml.safe_dump(doc))
    common = ("--dropout", "0", "--tasks", "rte,mrpc", *features)
    cmd = [sys.executable, "-m", "mtdnn.train", str(defs),
           *args_for(ddp_run, data_dir, tiny_encoder, *common, "--devices", "2", "--strategy", "ddp")[1:]]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    monkeypatch.setenv("MTDNN_TRACE_DIR", str(tmp_path / "trace-single"))
    assert main([str(defs), *args_for(single_run, data_dir, tiny_encoder, *common, "--devices", "1")[1:]]) == 0

    rank0, rank1 = (read_trace(tmp_path / "trace-ddp" / f"trace-rank{r}.jsonl") for r in (0, 1))
    single = read_trace(tmp_path / "trace-single" / "trace-rank0.jsonl")
    assert [s["task"] for s in rank0] == [s["task"] for s in rank1] == [s["task"] for s in single]
    for epoch in (0, 1):
        for task in ("rte", "mrpc"):
            rows = [r for trace in (rank0, rank1) for s in trace if s["epoch"] == epoch and s["task"] == task
                    for r in s["rows"]]
            assert sorted(rows) == list(range(40))  # every example once: no drop, no repeat
    for a, b, s in zip(rank0, rank1, single):
        assert sorted(a["rows"] + b["rows"]) == sorted(s["rows"])  # disjoint shards of the same global batch

    assert_same_weights(weights(ddp_run), weights(single_run), atol=1e-5)
    assert_same_metrics(ddp_run, single_run, atol=1e-6)
    assert json.loads((ddp_run / "schedule.json").read_text())["epochs"] == \
        json.loads((single_run / "schedule.json").read_text())["epochs"]


@pytest.mark.parametrize("features, fault", [((), 4), (STEP_FEATURES, 4)], ids=["plain", "accumulate2-eval2"])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, data_dir, tiny_encoder, monkeypatch, capsys,
                                                        features, fault):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(args_for(straight, data_dir, tiny_encoder, *features)) == 0  # dropout 0.1: RNG states restored

    # SIGTERM mid-epoch 2 (plain: each epoch has 3 + 3 steps; accumulation 2: 3 steps of 2 batches)
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", str(fault))
    assert main(args_for(resumed, data_dir, tiny_encoder, "--checkpoint-every-n-steps", "2", *features)) == 143
    assert not (resumed / "metrics.json").exists()
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == fault
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    assert main(args_for(resumed, data_dir, tiny_encoder, "--resume", *features)) == 0

    assert_same_weights(weights(straight), weights(resumed), atol=1e-5)
    assert_same_metrics(straight, resumed, atol=1e-6)
    assert json.loads((straight / "schedule.json").read_text()) == json.loads((resumed / "schedule.json").read_text())
    # one continuous log: the same rows (epoch, step, which metrics) as the uninterrupted run, in one metrics.csv
    assert logged_rows(straight) == logged_rows(resumed)
    assert sorted(p.name for p in (resumed / "logs").iterdir() if p.is_dir()) == \
        sorted(p.name for p in (straight / "logs").iterdir() if p.is_dir())

    # resuming a complete run, or from a truncated checkpoint, is refused with exit 2
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, args_for(resumed, data_dir, tiny_encoder, "--resume", *features))
    assert exit_info.value.code == 2 and "complete" in capsys.readouterr().err


def test_truncated_checkpoint_is_reported(tmp_path, data_dir, tiny_encoder, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "2")
    assert main(args_for(run_dir, data_dir, tiny_encoder, "--max-epochs", "1")) == 143
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, args_for(run_dir, data_dir, tiny_encoder, "--max-epochs", "1", "--resume"))
    assert exit_info.value.code == 2 and "truncated" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # flags that differ from the interrupted run
        run_cli(main, args_for(run_dir, data_dir, tiny_encoder, "--max-epochs", "2", "--resume"))
    assert exit_info.value.code == 2
