"""The GPU benchmark's code runs on the CPU in its tiny mode, and its FLOP count is the issue's formula."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench():
    sys.path.insert(0, str(BENCH))
    import trainer_speed

    return trainer_speed


def test_model_flops_formula():
    bench = load_bench()
    # 6 x N x tokens + 12 x L x h x sum(s^2): N = 1000, lengths 2 and 3, L = 2, h = 4
    assert bench.model_flops(1000, 2, 4, [2, 3]) == 6 * 1000 * 5 + 12 * 2 * 4 * (4 + 9)
    from transformers import BertConfig, BertModel

    # BERT-base: 12 layers x 7,087,872 (4 x 768^2 + 2 x 768 x 3072 + biases and layer norms) + the pooler 590,592
    assert bench.non_embedding_parameters(BertModel(BertConfig())) == 12 * 7_087_872 + 590_592


def test_tiny_benchmark_runs_on_the_cpu(tmp_path, data_dir, monkeypatch):
    bench = load_bench()
    out = tmp_path / "bench.json"
    code = bench.main(["--device", "cpu", "--tiny", "--cases", "bert-base-32,minilm-main", "--compile", "eager",
                       "--limit-train-examples", "12", "--sdpa-backend", "auto", "--data-dir", str(data_dir),
                       "--json", str(out)])
    results = json.loads(out.read_text())
    assert code == 0, results
    case = results["bert-base-32"]
    assert case["steps"] == 12 and case["lightning"]["fused_adamw"]  # 4 tasks x 12 rows in batches of 4
    for runner in ("lightning", "plain_loop"):
        assert case[runner]["tokens_per_s"] > 0 and case[runner]["timed_steps"] == 12 - 1 - 2
        assert case[runner]["real_tokens"] == case["plain_loop"]["real_tokens"]  # the same batches
    assert len(case["profile"]["top"]) == 8 and case["profile"]["gpu_busy_share"] is None  # no GPU here
    job = results["minilm-main"]
    assert job["exit_code"] == 0 and 0 <= job["best"]["average"] <= 1 and job["first_to_last_step_seconds"] > 0
    assert results["matmul_tflops_per_s"] > 0


def test_head_arms_task_definitions_and_paired_summary(tmp_path, capsys):
    sys.path.insert(0, str(BENCH))
    import head_arms

    from mtdnn.tasks.taskdef import parse_tasks

    san, names = head_arms.arm_task_defs("san")
    tasks = parse_tasks(san, "san arm")
    assert names == head_arms.TASKS and tasks["rte"].head.type == tasks["mrpc"].head.type == "san"
    assert tasks["stsb"].head.type is None and tasks["cola"].head.type is None
    mlm, names = head_arms.arm_task_defs("mlm-span")
    tasks = parse_tasks(mlm, "mlm arm")
    assert names[4:] == [f"{t}_mlm" for t in head_arms.TASKS] and tasks["rte_mlm"].masking.strategy == "span"
    assert tasks["mrpc_mlm"].text == tasks["mrpc"].text

    def run(arm, seed, rte, cola):  # cola's averaged metric is mcc, listed after accuracy in metrics.json
        best = {"tasks": {"rte": {"accuracy": rte}, "mrpc": {"accuracy": 0.8, "f1": 0.9},
                          "stsb": {"pearson": 0.85, "spearman": 0.8}, "cola": {"accuracy": 0.7, "mcc": cola}},
                "average": (rte + 0.8 + 0.85 + cola) / 4}
        path = tmp_path / arm / f"seed{seed}" / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"status": "complete", "best": best}))

    for seed, (d, s) in {1: (0.5, 0.6), 2: (0.55, 0.6)}.items():
        run("default", seed, d, 0.3)
        run("san", seed, s, 0.2)
    out = tmp_path / "summary.json"
    head_arms.main(["summary", "san", "--seeds", "1,2", "--runs-dir", str(tmp_path), "--output", str(out)])
    table = json.loads(out.read_text())["tasks"]
    assert table["rte"]["diff"] == pytest.approx([0.1, 0.05])  # san - default, seed for seed
    assert table["cola"]["default"] == [0.3, 0.3] and table["cola"]["diff_mean_sd"][0] == pytest.approx(-0.1)
    assert "paired diff" in capsys.readouterr().out
