"""examples/api.py, the README's notebook-style API example, runs end to end (tiny encoder, real data slices)."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_api_example_trains_two_tasks_loads_the_export_and_predicts(tmp_path, data_dir, tiny_encoder):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "api.py"), "--data-dir", str(data_dir),
                           "--encoder", tiny_encoder, "--limit-train-examples", "32", "--output-dir", str(run_dir)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert sum(line.startswith("rte: ") for line in lines) == 2 and sum(line.startswith("cola: ") for line in lines) == 2
    assert any(line.split()[1] in ("entailment", "not_entailment") for line in lines if line.startswith("rte: "))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["best"]["tasks"]) == {"rte", "cola"}
    [dev] = [ast.literal_eval(line.removeprefix("rte dev: ")) for line in lines if line.startswith("rte dev: ")]
    assert dev["accuracy"] == pytest.approx(metrics["best"]["tasks"]["rte"]["accuracy"], abs=1e-6)
