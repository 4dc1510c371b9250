"""Every common encoder family: BERT, RoBERTa, XLNet, ALBERT, DistilBERT, DeBERTa-v2, ELECTRA, ModernBERT.

The matrix runs each family end to end in a subprocess of its own (``encoder_family_run.py``: train two tasks,
evaluate, predict raw text, distil a 2-layer student, bad input), two at a time; this process then reloads each
family's export and must predict the same. In-process tests check what the toolkit does per family: segment ids,
the padding side, where the summary token is, and that padding never changes a prediction.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from encoder_families import FAMILIES, build_encoder, unsupported

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUPPORTED = [f for f in FAMILIES if f not in unsupported()]
# The pooling a task that sets none gets (the README's table).
EXPECTED_POOLING = {"bert": "pooler", "albert": "pooler", "xlnet": "last", "roberta": "cls", "distilbert": "cls",
                    "deberta-v2": "cls", "electra": "cls", "modernbert": "cls"}
SEGMENT_IDS = {"bert", "albert", "electra", "xlnet"}
WITHOUT_POOLER = {"xlnet", "distilbert", "deberta-v2", "electra", "modernbert"}


def test_every_family_is_run_or_listed_unsupported():
    assert set(FAMILIES) == set(EXPECTED_POOLING) and len(FAMILIES) == 8
    for family, reason in unsupported().items():  # none with transformers 5
        assert family in FAMILIES and "has no" in reason


def run_family(family: str, base: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(HERE / "encoder_family_run.py"), family, str(base / family)],
                          env=env, capture_output=True, text=True, timeout=600)
    result_file = base / family / "result.json"
    result = json.loads(result_file.read_text()) if proc.returncode == 0 and result_file.is_file() else None
    return {"code": proc.returncode, "stderr": proc.stderr[-4000:], "result": result, "work": base / family,
            "seconds": time.perf_counter() - start}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    """One subprocess per family, two at a time (a 2-core machine); ``{family: run_family(...)}``."""
    base = tmp_path_factory.mktemp("families")
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(SUPPORTED, pool.map(lambda f: run_family(f, base), SUPPORTED)))
    total = time.perf_counter() - start
    print(f"\nencoder matrix: {total:.1f} s for {len(runs)} families ("
          + ", ".join(f"{f} {r['seconds']:.1f} s" for f, r in runs.items()) + ")")
    return runs


def predictions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("family", SUPPORTED)
def test_family_end_to_end(matrix, family, tmp_path):
    from mtdnn.cli import predict
    from mtdnn.training.export import load_export

    run = matrix[family]
    assert run["code"] == 0, f"{family} failed:\n{run['stderr']}"
    result, work = run["result"], run["work"]
    # the toolkit chose the family's pooling; config.yaml, the export and the student record it
    expected = EXPECTED_POOLING[family]
    assert result["pooling"] == result["export_pooling"] == result["student"]["pooling"] == \
        {"polarity": expected, "overlap": expected}
    # evaluate reproduces the run's own dev scores
    assert result["evaluate"] == result["dev"]
    # the SAN answer module trains on the pair task (encoder_family_run.RAW_PAIR: three pairs) and its export predicts raw pairs (probabilities sum to 1)
    assert result["san"]["predictions"] == 3 and 0 <= result["san"]["dev"]["accuracy"] <= 1
    assert result["san"]["probabilities_sum"] == pytest.approx([1.0] * 3, abs=1e-5)
    # this process (not the one that trained) reloads the export and predicts the same raw text
    for task in ("polarity", "overlap"):
        raw = work / ("single.tsv" if task == "polarity" else "pair.tsv")
        out = tmp_path / f"{task}.jsonl"
        assert predict.main([str(work / "run" / "export"), "--task", task, "--input", str(raw), "--format", "jsonl",
                             "--output", str(out)]) == 0
        trained, reloaded = predictions(work / f"run-{task}.jsonl"), predictions(out)
        assert len(trained) == len(reloaded) == len(raw.read_text().splitlines())
        for a, b in zip(trained, reloaded):
            assert a["prediction"] == b["prediction"] and a["id"] == b["id"]
            assert a["probabilities"] == pytest.approx(b["probabilities"], abs=2e-6)
        assert len({r["probability"] for r in trained}) > 1  # the text reaches the head: rows differ
    # the student has 2 layers (ALBERT: its shared layer run twice) and its export loads
    student = result["student"]
    assert student["num_hidden_layers"] == 2
    model, _, tasks = load_export(work / "student" / "export")
    assert set(tasks) == {"polarity", "overlap"} and model.encoder.config.num_hidden_layers == 2
    if family == "modernbert":  # layers 0 and 3 kept their global attention; the default pattern would not
        assert student["layer_types"] == ["full_attention", "full_attention"]
        assert [layer.attention_type for layer in model.encoder.layers] == ["full_attention"] * 2
        assert all(layer.attn.sliding_window is None for layer in model.encoder.layers)
    if family == "albert":
        teacher, _, _ = load_export(work / "run" / "export")
        assert sum(p.numel() for p in model.encoder.parameters()) == sum(p.numel() for p in teacher.encoder.parameters())
        refused = result["layer_list_refused"]
        assert refused["code"] == 2 and not refused["run_dir_made"]
        assert "field 'init.layers'" in refused["message"] and "set init.num_layers" in refused["message"]
    # bad input: a pooler pooling on an encoder without one exits 2 before a run directory is made
    if family in WITHOUT_POOLER:
        refused = result["pooler_refused"]
        assert refused["code"] == 2 and not refused["run_dir_made"]
        assert "pooler-tasks.yaml: task 'polarity', field 'head.pooling': 'pooler'" in refused["message"]
        assert f"this encoder then gets {expected}" in refused["message"]
    else:
        assert "pooler_refused" not in result


# ------------------------------------------------------------------------------------------- in-process checks


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("family-encoders")
    return {f: str(build_encoder(f, base / f)) for f in SUPPORTED}


@pytest.mark.parametrize("family", SUPPORTED)
def test_segment_ids_padding_side_and_summary_token(encoders, family):
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.data import Example
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenize_examples
    from mtdnn.tasks.taskdef import parse_tasks
    from mtdnn.training.inference import predict_outputs

    tokenizer = load_tokenizer(encoders[family])
    assert ("token_type_ids" in tokenizer.model_input_names) == (family in SEGMENT_IDS)
    tasks = parse_tasks({"tasks": {"pair": {"type": "classification", "text": ["a", "b"], "label": "y",
                                            "labels": ["no", "yes"], "splits": {"train": {"path": "x"}}}}}, "mem")
    examples = [Example(id="0", line=1, text_a="The film was good.", text_b="there is a film"),
                Example(id="1", line=2, text_a="This garden seemed rather grim near the river and the city",
                        text_b="there is a garden near the river")]
    split = tokenize_examples(examples, tasks["pair"], tokenizer)
    batch = collate([split[0], split[1]], tasks["pair"], tokenizer.pad_token_id, padding_side=split.padding_side)
    short = len(split.input_ids[0])
    assert short < len(split.input_ids[1]) == batch.input_ids.shape[1]
    pads = batch.attention_mask[0] == 0
    if family == "xlnet":  # left padding; <cls> is the last token of every row, segment ids A=0, B=1, <cls>=2
        assert split.padding_side == "left" and pads[: pads.sum()].all()
        assert (batch.input_ids[:, -1] == tokenizer.cls_token_id).all()
        assert batch.token_type_ids[0, -short:].unique().tolist() == [0, 1, 2]
    else:
        assert split.padding_side == "right" and pads[short:].all() and not pads[:short].any()
        assert (batch.input_ids[:, 0] == (tokenizer.cls_token_id or tokenizer.bos_token_id)).all()
    if family in SEGMENT_IDS - {"xlnet"}:  # pair segments: A then B
        assert batch.token_type_ids[0, :short].unique().tolist() == [0, 1]
    # padding never changes a prediction: each row alone equals the row in the padded batch
    torch.manual_seed(0)
    model = MultiTaskModel(load_encoder(encoders[family]), tasks).eval()
    assert model.tasks["pair"].head.pooling == EXPECTED_POOLING[family]
    together = predict_outputs(model, tasks["pair"], split, tokenizer.pad_token_id or 0, batch_size=2)
    alone = predict_outputs(model, tasks["pair"], split, tokenizer.pad_token_id or 0, batch_size=1)
    assert torch.allclose(together, alone, atol=1e-5), (together, alone)


def test_layer_lists_per_family(encoders):
    from mtdnn.distillation.student import select_layers, truncate_layers
    from mtdnn.errors import ConfigError
    from mtdnn.modeling.model import load_encoder

    for family in SUPPORTED:
        if family == "albert":
            with pytest.raises(ConfigError, match="shares one layer's weights.*set init.num_layers"):
                select_layers(load_encoder(encoders[family]), [0, 2], "spec")
            assert truncate_layers(load_encoder(encoders[family]), 3, "spec").config.num_hidden_layers == 3
            continue
        encoder = select_layers(load_encoder(encoders[family]), [0, 1, 3], "spec")
        assert encoder.config.num_hidden_layers == 3
        with pytest.raises(ConfigError, match=r"increasing indices in 0\.\.3"):
            select_layers(load_encoder(encoders[family]), [2, 1], "spec")
    with pytest.raises(ConfigError, match="must keep layer 0"):
        select_layers(load_encoder(encoders["modernbert"]), [1, 3], "spec")


def test_the_run_log_says_which_pooling_was_chosen(encoders, caplog):
    import logging

    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.taskdef import parse_tasks
    from mtdnn.training.resolve import log_pooling

    body = {"type": "classification", "text": ["a"], "label": "y", "labels": ["no", "yes"],
            "splits": {"train": {"path": "x"}}}
    asked = parse_tasks({"tasks": {"unset": body, "mean": {**body, "head": {"pooling": "mean"}}}}, "mem")
    with caplog.at_level(logging.INFO, logger="mtdnn.train"):
        resolved = log_pooling(asked, MultiTaskModel(load_encoder(encoders["xlnet"]), asked))
    assert {n: t.head.pooling for n, t in resolved.items()} == {"unset": "last", "mean": "mean"}
    assert "task 'unset': head.pooling last (chosen for the xlnet encoder)" in caplog.text
    assert "task 'mean': head.pooling mean (set by the task)" in caplog.text
