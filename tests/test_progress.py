"""What a run says while it trains (issue 26, part 1): plain progress and dev lines when the output is a file,
per-task training-loss columns in logs/metrics.csv, and none of the start-up noise a user cannot act on."""

import csv
import json
import re
from pathlib import Path

import pytest
import torch

from mtdnn.train import main
from mtdnn.training.progress import TrainingProgress, _duration, _Window

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")
STEP_LINE = re.compile(r"^step (\d+)/(\d+) \((\d+)%\)  epoch (\d)/2  loss ((?:\w+ [0-9.]+ ?)+)  lr ([0-9.e+-]+)  "
                       r"([0-9.]+) examples/s  (\d+:\d\d:\d\d) left$")


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, data_dir, tiny_encoder):
    """A two-task run of 2 x 12 steps whose standard error is a file (as under ``nohup ... > log 2>&1``)."""
    run_dir = tmp_path_factory.mktemp("runs") / "progress"
    log = run_dir.parent / "train.log"
    import contextlib

    with log.open("w") as out, contextlib.redirect_stderr(out):
        code = main([GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                     "--limit-train-examples", "96", "--limit-eval-examples", "32", "--batch-size", "16",
                     "--max-epochs", "2", "--accelerator", "cpu", "--progress-every-n-steps", "4",
                     "--output-dir", str(run_dir)])
    assert code == 0
    return run_dir, log.read_text()


def test_a_log_file_gets_a_line_every_n_steps_and_one_per_dev_evaluation(logged_run):
    run_dir, text = logged_run
    lines = text.splitlines()
    steps = [STEP_LINE.match(line) for line in lines if line.startswith("step ")]
    assert steps and all(steps), [line for line in lines if line.startswith("step ")][:3]
    assert [int(m.group(1)) for m in steps] == [4, 8, 12, 16, 20, 24]  # every 4 optimizer steps of 24
    assert {int(m.group(2)) for m in steps} == {24}
    for m in steps:
        losses = m.group(5).split()
        assert set(losses[0::2]) <= {"rte", "stsb"} and all(float(v) >= 0 for v in losses[1::2])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    dev = [line for line in lines if line.startswith("dev step ")]
    assert len(dev) == len(metrics["epochs"]) == 2
    for line, epoch in zip(dev, metrics["epochs"]):
        assert f"epoch {epoch['epoch']}:" in line and f"average {epoch['average']:.4f}" in line
        assert f"rte accuracy {epoch['tasks']['rte']['accuracy']:.4f}" in line
        assert f"stsb pearson {epoch['tasks']['stsb']['pearson']:.4f}" in line
    # the dev line of epoch 1 comes after the step lines of epoch 1 and before those of epoch 2
    assert lines.index(dev[0]) > max(i for i, line in enumerate(lines) if line.startswith("step 12/"))
    assert lines.index(dev[0]) < min(i for i, line in enumerate(lines) if line.startswith("step 16/"))


def test_no_start_up_noise_and_no_bar_in_a_log_file(logged_run):
    _, text = logged_run
    for noise in ("litlogger", "LeafSpec", "Total FLOPs", "v_num", "weights_only` was not set", "Loading weights",
                  "Saving the dataset", "will save all targets and predictions", "━"):
        assert noise not in text, noise
    assert "training rte (96 train, 32 dev), stsb (96 train, 32 dev)" in text  # the run summary stays


def test_metrics_csv_has_one_training_loss_column_per_task(logged_run):
    run_dir, _ = logged_run
    with (run_dir / "logs" / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    columns = set(rows[0])
    assert {"train/rte_loss", "train/stsb_loss", "train/rte_loss_epoch", "train/stsb_loss_epoch"} <= columns
    assert not any(c.startswith("train/loss") for c in columns)  # no column mixing cross-entropy and squared error
    stepped = [r for r in rows if r["train/rte_loss"] or r["train/stsb_loss"]]
    assert [int(r["step"]) for r in stepped] == [10, 20]  # Lightning's log_every_n_steps
    assert all(r["epoch"] != "" for r in stepped)


class _Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_lines_are_plain_only_off_a_terminal_and_the_window_means_per_task():
    assert TrainingProgress(10, stream=_Stream(False)).prints()
    assert not TrainingProgress(10, stream=_Stream(True)).prints()
    assert not TrainingProgress(0, stream=_Stream(False)).prints()
    window = _Window(step=0)
    for task, loss in (("rte", 0.5), ("stsb", 4.0), ("rte", 0.7), ("stsb", 2.0), ("stsb", 3.0)):
        window.add(task, torch.tensor(loss), examples=8)
    assert window.means() == pytest.approx({"rte": 0.6, "stsb": 3.0}) and window.examples == 40
    assert isinstance(window.sums["rte"], torch.Tensor)  # summed on the device, read only by means()
    assert _duration(3725.4) == "1:02:05" and _duration(-1) == "0:00:00"
    entry = {"step": 24, "epoch": 1, "tasks": {"rte": {"accuracy": 0.5}, "stsb": {"pearson": 0.25, "spearman": 0.2}},
             "average": 0.375}
    assert TrainingProgress.dev_line(entry) == ("dev step 24 epoch 1: rte accuracy 0.5000 | stsb pearson 0.2500 "
                                                "spearman 0.2000 | average 0.3750")


def test_metrics_json_agrees_with_the_csv_on_each_evaluations_step_and_has_no_float32_noise(logged_run):
    run_dir, _ = logged_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    with (run_dir / "logs" / "metrics.csv").open(newline="") as f:
        dev_rows = [r for r in csv.DictReader(f) if r["dev/average"]]
    assert [int(r["step"]) for r in dev_rows] == [e["step"] for e in metrics["epochs"]] == [12, 24]
    assert [int(float(r["epoch"])) + 1 for r in dev_rows] == [e["epoch"] for e in metrics["epochs"]]
    for entry in metrics["epochs"] + [metrics["best"]]:
        values = [entry["average"]] + [v for scores in entry["tasks"].values() for v in scores.values()]
        assert all(float(f"{v:.7g}") == v for v in values), values  # 0.51, not 0.5099999904632568
    for row, entry in zip(dev_rows, metrics["epochs"]):
        assert float(row["dev/rte/accuracy"]) == pytest.approx(entry["tasks"]["rte"]["accuracy"], rel=1e-6)
