"""The GPU benchmark's code runs on the CPU in its tiny mode, and its FLOP count is the issue's formula."""

import json
import sys
from pathlib import Path

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
