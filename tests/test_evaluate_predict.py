"""Using a trained model: evaluate and predict from a run or an export, GLUE files, raw input, a YAML-only task."""

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mtdnn import evaluate

from mtdnn import predict
from mtdnn.evaluation import predict as predict_lib

from mtdnn import train
from mtdnn.errors import run_cli

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_dir, tiny_encoder):
    """A complete 2-epoch rte + stsb run of the tiny encoder (classification and regression heads)."""
    path = tmp_path_factory.mktemp("runs") / "rte-stsb"
    assert train.main([GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                       "--limit-train-examples", "64", "--batch-size", "16", "--max-epochs", "2",
                       "--accelerator", "cpu", "--keep-last-checkpoint", "--output-dir", str(path)]) == 0
    return path


def read_tsv(path_or_text) -> list[dict]:
    text = path_or_text if isinstance(path_or_text, str) else path_or_text.read_text()
    return list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_scores_equal(got: dict, expected: dict) -> None:
    """Bit-identical: the same batches in the same order give the same floats (another batch size differs
    by about 2e-6 in STS-B's Pearson, so even a 1e-6 tolerance would hide a batching change)."""
    assert got == expected


def exit_code_and_error(command, args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(command.main, [str(a) for a in args])
    return exit_info.value.code, capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------ evaluate


def test_evaluate_reproduces_metrics_json_for_best_and_last_checkpoints(run_dir, capsys):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert evaluate.main([str(run_dir)]) == 0  # dev, every task, the run's data root and best checkpoint
    table = capsys.readouterr().out
    result = json.loads((run_dir / "eval-dev.json").read_text())
    assert result["checkpoint"].endswith("best.ckpt") and result["examples"] == {"rte": 277, "stsb": 1500}
    assert_scores_equal(result["tasks"], metrics["best"]["tasks"])
    assert result["average"] == metrics["best"]["average"]
    assert "rte" in table and "pearson" in table and f"{metrics['best']['average']:.4f}" in table

    out = run_dir.parent / "last.json"
    assert evaluate.main([str(run_dir), "--checkpoint", "checkpoints/last.ckpt", "--output", str(out)]) == 0
    last = json.loads(out.read_text())
    assert last["checkpoint"].endswith("last.ckpt")
    assert_scores_equal(last["tasks"], metrics["epochs"][-1]["tasks"])


def test_evaluate_from_a_copied_export_alone(run_dir, data_dir, tmp_path):
    from transformers import AutoModel

    export = shutil.copytree(run_dir / "export", tmp_path / "model")  # no checkpoints, no run directory
    assert AutoModel.from_pretrained(export / "encoder").config.hidden_size == 32
    metrics = json.loads((run_dir / "metrics.json").read_text())
    out = tmp_path / "eval.json"
    assert evaluate.main([str(export), "--tasks", "rte", "--data-dir", str(data_dir), "--output", str(out)]) == 0
    assert_scores_equal(json.loads(out.read_text())["tasks"], {"rte": metrics["best"]["tasks"]["rte"]})


# ------------------------------------------------------------------------------------------------------ batching


def test_batches_are_length_sorted_and_outputs_come_back_in_input_order(tiny_encoder):
    from mtdnn.tasks.tokenized import TokenizedSplit
    from mtdnn.training.inference import predict_outputs
    from mtdnn.tasks.taskdef import parse_tasks

    task = parse_tasks({"tasks": {"t": {"type": "regression", "splits": {}, "text": ["s"], "label": "y"}}}, "mem")["t"]
    lengths = [3, 9, 1, 7, 7, 2, 8, 5, 4, 6]
    split = TokenizedSplit("t", "input", [str(i) for i in range(10)], [[5] * n for n in lengths], None, None, lengths)
    seen = []

    def length_model(task_name, input_ids, attention_mask, token_type_ids):  # output: each row's true length
        seen.append(attention_mask.sum(-1).tolist())
        return attention_mask.sum(-1).float()

    outputs = predict_outputs(length_model, task, split, pad_token_id=0, batch_size=3)
    assert outputs.tolist() == lengths
    assert seen == [[9, 8, 7], [7, 6, 5], [4, 3, 2], [1]]


def test_batched_predictions_equal_one_at_a_time(run_dir, data_dir):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.tokenized import tokenize_examples
    from mtdnn.training.inference import load_model, predict_outputs

    loaded = load_model(run_dir)
    task = loaded.task("rte")
    examples = load_split(task, "dev", data_dir).examples[:40]
    batched = predict_outputs(loaded.model, task, tokenize_examples(examples, task, loaded.tokenizer), 0, 16)
    single = torch.cat([predict_outputs(loaded.model, task, tokenize_examples([ex], task, loaded.tokenizer), 0, 1)
                        for ex in examples])
    assert batched.shape == (40, 2)
    assert torch.allclose(batched, single, atol=1e-5)


# ------------------------------------------------------------------------------------------------------ predict


def test_glue_submission_files(run_dir, data_dir, tmp_path):
    out = tmp_path / "preds"
    for task in ("rte", "stsb"):
        assert predict.main([str(run_dir), "--task", task, "--split", "test", "--data-dir", str(data_dir),
                             "--output", f"{out}/"]) == 0
    rte = read_tsv(out / "RTE.tsv")
    gold_index = [r["index"] for r in read_tsv(data_dir / "glue" / "RTE" / "test.tsv")]
    assert list(rte[0]) == ["index", "prediction"] and [r["index"] for r in rte] == gold_index
    assert len(rte) == 3000 and {r["prediction"] for r in rte} <= {"entailment", "not_entailment"}
    stsb = read_tsv(out / "STS-B.tsv")
    assert len(stsb) == 1379 and [r["index"] for r in stsb] == [str(i) for i in range(1379)]
    assert all(float(r["prediction"]) == float(r["prediction"]) and len(r["prediction"].split(".")[1]) == 3
               for r in stsb)  # finite scores with 3 decimals, as GLUE submissions usually have


def test_text_stdin_and_file_inputs_agree(run_dir, tmp_path, capsys, monkeypatch):
    pair = ["A man is playing a guitar.", "A person plays an instrument."]
    assert predict.main([str(run_dir), "--task", "rte", "--text", *pair]) == 0
    [single] = read_tsv(capsys.readouterr().out)
    assert list(single) == ["id", "prediction", "probability", "prob_entailment", "prob_not_entailment"]
    probs = [float(single["prob_entailment"]), float(single["prob_not_entailment"])]
    assert sum(probs) == pytest.approx(1.0, abs=1e-5) and float(single["probability"]) == max(probs)
    assert single["prediction"] == ["entailment", "not_entailment"][probs.index(max(probs))]

    monkeypatch.setattr(sys, "stdin", io.StringIO("The cat sat.\tA cat was sitting.\n\n" + "\t".join(pair) + "\n"))
    out = tmp_path / "stdin.jsonl"
    assert predict.main([str(run_dir), "--task", "rte", "--input", "-", "--format", "jsonl", "--output", str(out)]) == 0
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["0", "1"]
    assert rows[1]["prediction"] == single["prediction"]
    assert rows[1]["probabilities"]["entailment"] == pytest.approx(probs[0], abs=1e-5)

    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(json.dumps({"id": "q7", "sentence1": pair[0], "sentence2": pair[1]}) + "\n")
    out = tmp_path / "file.tsv"
    assert predict.main([str(run_dir), "--task", "rte", "--input", str(jsonl), "--output", str(out)]) == 0
    [row] = read_tsv(out)
    assert row["id"] == "q7" and row["prediction"] == single["prediction"]

    assert predict.main([str(run_dir), "--task", "stsb", "--text", *pair, "--format", "jsonl"]) == 0
    [score] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert isinstance(score["prediction"], float) and "probabilities" not in score


def test_text_values_keep_their_tabs_and_tsv_output_quotes_fields(run_dir, tmp_path, capsys):
    """A tab inside a --text value is text, not a field separator; an id holding a tab, a line break or a quote
    comes back whole from the tsv output (csv excel-tab quoting)."""
    pair = ["A man\tis playing a guitar.", "A person plays an instrument."]
    assert predict.main([str(run_dir), "--task", "rte", "--text", *pair]) == 0
    assert len(read_tsv(capsys.readouterr().out)) == 1
    odd_id = 'q\t7\r\n"x"'
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(json.dumps({"id": odd_id, "sentence1": pair[0], "sentence2": pair[1]}) + "\n")
    out = tmp_path / "out.tsv"
    assert predict.main([str(run_dir), "--task", "rte", "--input", str(jsonl), "--output", str(out)]) == 0
    [row] = list(csv.DictReader(io.StringIO(out.read_bytes().decode("utf-8"), newline=""), dialect="excel-tab"))
    assert row["id"] == odd_id and row["prediction"] in ("entailment", "not_entailment")


def test_tsv_lines_quote_tabs_line_breaks_and_quotes_only():
    from types import SimpleNamespace

    from mtdnn.evaluation.token_predict import format_rows
    from mtdnn.tasks.types import TASK_TYPES

    fields = ["plain", "a\tb", "c\nd", "e\rf", 'say "hi"', 3, 0.25]
    line = predict_lib.tsv_line(fields)
    assert line == 'plain\t"a\tb"\t"c\nd"\t"e\rf"\t"say ""hi"""\t3\t0.25\n'
    assert next(csv.reader(io.StringIO(line, newline=""), dialect="excel-tab")) == [str(f) for f in fields]
    assert predict_lib.tsv_line(["id", "prediction"]) == "id\tprediction\n"
    answer = {"id": "q1", "answer": 'the "old"\tkeeper\nof', "start": 4, "end": 26}
    text = format_rows(SimpleNamespace(type="span_extraction", kind=TASK_TYPES["span_extraction"]), [answer], "tsv")
    assert list(csv.reader(io.StringIO(text, newline=""), dialect="excel-tab")) == [
        ["id", "prediction", "start", "end"], ["q1", answer["answer"], "4", "26"]]
    tagged = {"id": "a\tb", "entities": [{"type": "PER", "start": 0, "end": 6}]}
    text = format_rows(SimpleNamespace(type="sequence_labelling", kind=TASK_TYPES["sequence_labelling"]), [tagged], "tsv")
    assert text == 'id\tprediction\n"a\tb"\tPER:0-6\n'


def test_a_copied_export_predicts_the_same_in_a_fresh_process(run_dir, data_dir, tmp_path):
    export = shutil.copytree(run_dir / "export", tmp_path / "model")
    here, there = tmp_path / "here.jsonl", tmp_path / "there.jsonl"
    common = ["--task", "rte", "--split", "dev", "--data-dir", str(data_dir), "--format", "jsonl"]
    assert predict.main([str(run_dir), *common, "--output", str(here)]) == 0  # best checkpoint, this process
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mtdnn.predict", str(export), *common, "--output", str(there)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    a, b = read_jsonl(here), read_jsonl(there)
    assert len(a) == 277 and [r["id"] for r in a] == [r["id"] for r in b]
    assert [r["prediction"] for r in a] == [r["prediction"] for r in b]
    assert max(abs(x["probability"] - y["probability"]) for x, y in zip(a, b)) <= 1e-6


def test_a_trained_runs_hf_folders_serve_its_predictions_through_transformers(run_dir, data_dir, tmp_path):
    """export/hf/<task>/ of a real run: pipeline raw scores (stsb) equal mtdnn.predict's; rte's SAN head (glue.yaml's
    default for pair classification) has no family class and says so (classification through the pipeline is
    tests/test_hf_export.py's)."""
    from transformers import pipeline

    from mtdnn.tasks.data import load_split
    from mtdnn.training.export import load_export_tasks

    meta = json.loads((run_dir / "export" / "mtdnn_export.json").read_text())
    assert meta["huggingface"] == {"stsb": "hf/stsb"} and list(meta["toolkit_only"]) == ["rte"]
    assert meta["toolkit_only"]["rte"].startswith("head type 'san'")
    assert not (run_dir / "export" / "hf" / "rte").exists()
    tasks = load_export_tasks(run_dir / "export")
    for name in ("stsb",):
        task = tasks[name]
        examples = load_split(task, "dev", data_dir).examples[:8]
        source, output = tmp_path / f"{name}.jsonl", tmp_path / f"{name}-out.jsonl"
        source.write_text("".join(json.dumps(dict(zip(task.text, (ex.text_a, ex.text_b)))) + "\n" for ex in examples))
        assert predict.main([str(run_dir / "export"), "--task", name, "--input", str(source), "--format", "jsonl",
                             "--output", str(output)]) == 0
        classify = pipeline("text-classification", model=str(run_dir / "export" / meta["huggingface"][name]))
        served = classify([{"text": ex.text_a, "text_pair": ex.text_b} for ex in examples], top_k=None,
                          truncation=True)
        for row, scores in zip(read_jsonl(output), served):
            scores = {s["label"]: s["score"] for s in scores}
            expected = row.get("probabilities") or {"score": row["prediction"]}
            assert scores == pytest.approx(expected, abs=1e-5)


def test_ranking_input_and_output_use_the_candidate_columns():
    from mtdnn.training.inference import decode
    from mtdnn.tasks.taskdef import load_task_defs

    task = load_task_defs(ROOT / "task_defs" / "arct.yaml")["arct"]
    [example] = predict_lib.parse_lines(["a claim\ta reason\twarrant a\twarrant b"], "<stdin>", task, "tsv")
    assert example.text_a == "a claim a reason" and example.candidates == ["warrant a", "warrant b"]
    [row] = decode(task, torch.tensor([[0.0, 2.0]]))
    assert row["prediction"] == 1 and row["probabilities"]["warrant1"] == pytest.approx(0.880797, abs=1e-6)
    table = read_tsv(predict_lib.format_predictions(task, ["0"], [row], "tsv"))
    assert table == [{"id": "0", "prediction": "1", "probability": "0.880797", "prob_warrant0": "0.119203",
                      "prob_warrant1": "0.880797"}]


# ------------------------------------------------------------------------------------------------------ custom task


def test_custom_csv_task_by_yaml_alone(data_dir, tiny_encoder, tmp_path, capsys):
    root = tmp_path / "data"
    (root / "reviews").mkdir(parents=True)
    (root / "glue").symlink_to(data_dir / "glue")
    sst = read_tsv(data_dir / "glue" / "SST-2" / "train.tsv")
    for name, rows in (("train", sst[:64]), ("dev", sst[64:96])):
        with open(root / "reviews" / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence", "label"])
            writer.writerows([r["sentence"].strip(), ["negative", "positive"][int(r["label"])]] for r in rows)
    yaml_path = tmp_path / "my_tasks.yaml"
    yaml_path.write_text(
        "tasks:\n"
        "  reviews:\n"
        "    type: classification\n"
        "    splits:\n"
        "      train: {path: reviews/train.csv, format: csv}\n"
        "      dev: {path: reviews/dev.csv, format: csv}\n"
        "    text: [sentence]\n"
        "    label: label\n"
        "    labels: [negative, positive]\n"
        "  rte:\n"
        "    type: classification\n"
        "    splits: {train: {path: glue/RTE/train.tsv}, dev: {path: glue/RTE/dev.tsv}}\n"
        "    text: [sentence1, sentence2]\n"
        "    label: label\n"
        "    labels: [entailment, not_entailment]\n")
    run = tmp_path / "run"
    assert train.main([str(yaml_path), "--data-dir", str(root), "--encoder", tiny_encoder, "--max-epochs", "1",
                       "--limit-train-examples", "64", "--batch-size", "16", "--accelerator", "cpu",
                       "--output-dir", str(run)]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["best"]["tasks"]) == {"reviews", "rte"}
    capsys.readouterr()

    assert predict.main([str(run), "--task", "reviews", "--text", "a gripping , funny and moving film"]) == 0
    [row] = read_tsv(capsys.readouterr().out)
    assert row["prediction"] in {"negative", "positive"} and "prob_positive" in row
    out = tmp_path / "reviews-dev.tsv"
    assert predict.main([str(run), "--task", "reviews", "--split", "dev", "--output", str(out)]) == 0
    assert len(read_tsv(out)) == 32
    assert evaluate.main([str(run), "--tasks", "reviews", "--output", str(tmp_path / "e.json")]) == 0
    assert_scores_equal(json.loads((tmp_path / "e.json").read_text())["tasks"],
                        {"reviews": metrics["best"]["tasks"]["reviews"]})


# ------------------------------------------------------------------------------------------------------ bad input


def test_bad_runs_tasks_and_splits_exit_2(run_dir, data_dir, tmp_path, capsys):
    interrupted = tmp_path / "interrupted"
    (interrupted / "checkpoints").mkdir(parents=True)
    (interrupted / "config.yaml").write_text("command: train\n")
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    cases = [
        (evaluate, [interrupted], f"{interrupted}: not a complete run"),
        (predict, [tmp_path / "nowhere", "--task", "rte", "--text", "a", "b"], "run directory does not exist"),
        (evaluate, [run_dir, "--tasks", "rte,mrpc", "--data-dir", data_dir], "task 'mrpc' was not trained"),
        (predict, [run_dir, "--task", "mrpc", "--text", "a", "b"], "task 'mrpc' was not trained"),
        (evaluate, [run_dir, "--split", "test", "--data-dir", data_dir], "split 'test' has no labels"),
        (evaluate, [run_dir, "--checkpoint", damaged], f"{damaged}: cannot read the checkpoint"),
        (evaluate, [run_dir, "--output", tmp_path], f"--output {tmp_path}: is a directory"),
        (evaluate, [run_dir, "--output", tmp_path / "no" / "e.json"], "does not exist"),
        (predict, [run_dir, "--text", "a", "b"], "has several tasks (rte, stsb)"),
        (predict, [run_dir, "--task", "rte", "--text", "only one"], "--text: task 'rte' takes 2 text(s)"),
    ]
    for command, args, message in cases:
        code, err = exit_code_and_error(command, args, capsys)
        assert code == 2 and message in err, (args, err)


def test_bad_input_lines_exit_2_and_write_no_output(run_dir, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a premise\ta hypothesis\n\nfirst\tsecond\tthird\n")
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"sentence1": "a", "sentence2": "b"}\n{"sentence1": "a"}\n')
    number = tmp_path / "number.jsonl"
    number.write_text('{"sentence1": "a", "sentence2": null}\n\n{"sentence1": "a", "sentence2": 5}\n')
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"sentence1": {"text": "a"}, "sentence2": "b"}\n')
    out = tmp_path / "out.tsv"
    cases = [
        ([bad], f"{bad}: line 3: task 'rte': expected 2 tab-separated field(s) (sentence1, sentence2), found 3"),
        ([empty], f"{empty}: no examples (the input is empty)"),
        ([broken], f"{broken}: line 2: task 'rte': field 'sentence2' is missing"),
        ([number], f"{number}: line 3: task 'rte', field 'sentence2': expected a string, found a number (value: 5)"),
        ([nested], f"{nested}: line 1: task 'rte', field 'sentence1': expected a string, found an object "
                   '(value: {"text": "a"})'),
    ]
    for input_path, message in cases:
        code, err = exit_code_and_error(predict, [run_dir, "--task", "rte", "--input", *input_path,
                                                  "--output", out], capsys)
        assert code == 2 and message in err, err
        assert not out.exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO("just one field\n"))
    code, err = exit_code_and_error(predict, [run_dir, "--task", "rte", "--input", "-", "--output", out], capsys)
    assert code == 2 and "<stdin>: line 1: task 'rte': expected 2" in err
    assert not out.exists() and not list(tmp_path.glob("out.tsv*"))


def test_an_export_truncates_as_its_run_did(tmp_path, data_dir, tiny_encoder, capsys):
    """Trained with --max-length 24 (the tasks' own is 128): the export's tasks.yaml and its Hugging Face folder's
    tokenizer say 24, so that evaluating the run and its export scores the same rows the same way (issue 26)."""
    import yaml
    from transformers import AutoTokenizer

    path = tmp_path / "short"
    assert train.main([GLUE, "--tasks", "rte,cola", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                       "--limit-train-examples", "32", "--batch-size", "16", "--max-epochs", "1", "--max-length", "24",
                       "--accelerator", "cpu", "--output-dir", str(path)]) == 0
    tasks = yaml.safe_load((path / "export" / "tasks.yaml").read_text())["tasks"]
    assert tasks["rte"]["max_length"] == tasks["cola"]["max_length"] == 24
    # RTE's SAN head has no Hugging Face folder; CoLA's linear head has one, whose tokenizer truncates at 24
    assert AutoTokenizer.from_pretrained(path / "export" / "hf" / "cola").model_max_length == 24
    assert evaluate.main([str(path), "--output", str(tmp_path / "run.json")]) == 0
    assert evaluate.main([str(path / "export"), "--output", str(tmp_path / "export.json")]) == 0
    run, export = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("run", "export"))
    assert_scores_equal(export["tasks"], run["tasks"])
    assert run["examples"] == export["examples"] == {"rte": 277, "cola": 1043}



def test_no_export_hf_writes_the_toolkits_export_only(tmp_path, data_dir, tiny_encoder):
    from mtdnn.training.export import HF_OFF, load_export

    path = tmp_path / "no-hf"
    assert train.main([GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                       "--limit-train-examples", "16", "--limit-eval-examples", "16", "--batch-size", "16",
                       "--max-epochs", "1", "--no-export-hf", "--accelerator", "cpu", "--output-dir", str(path)]) == 0
    assert not (path / "export" / "hf").exists()
    meta = json.loads((path / "export" / "mtdnn_export.json").read_text())
    assert meta["huggingface"] == {} and meta["toolkit_only"] == {"rte": HF_OFF, "stsb": HF_OFF}
    model, _, tasks = load_export(path / "export")  # the toolkit's export loads as ever
    assert set(tasks) == {"rte", "stsb"}


def test_evaluate_and_predict_a_file_the_task_definitions_do_not_name(run_dir, data_dir, tmp_path, capsys):
    """--file: a labelled file in the task's own format, scored without adding a split to the definitions before
    training (issue 26); the same rows as the dev split give the same scores and predictions."""
    import shutil

    held = tmp_path / "held-out" / "rte-copy.tsv"
    held.parent.mkdir()
    shutil.copy(data_dir / "glue" / "RTE" / "dev.tsv", held)
    assert evaluate.main([str(run_dir), "--tasks", "rte", "--output", str(tmp_path / "dev.json")]) == 0
    assert evaluate.main([str(run_dir), "--tasks", "rte", "--file", str(held), "--split", "heldout"]) == 0
    written = run_dir / "eval-file-rte-copy.json"  # never eval-dev.json
    dev, from_file = (json.loads(p.read_text()) for p in (tmp_path / "dev.json", written))
    assert from_file["split"] == "heldout" and from_file["examples"] == {"rte": 277}
    assert_scores_equal(from_file["tasks"], dev["tasks"])
    capsys.readouterr()
    assert predict.main([str(run_dir), "--task", "rte", "--split", "dev", "--format", "jsonl",
                         "--output", str(tmp_path / "dev.jsonl")]) == 0
    assert predict.main([str(run_dir), "--task", "rte", "--file", str(held), "--format", "jsonl",
                         "--output", str(tmp_path / "file.jsonl")]) == 0
    assert read_jsonl(tmp_path / "file.jsonl") == read_jsonl(tmp_path / "dev.jsonl")


@pytest.mark.parametrize("extra, message", [
    (["--file", "no/such/file.tsv"], "--file no/such/file.tsv: no such file"),
    (["--tasks", "rte,stsb", "--file", "{held}"], "--file: scores one task; --tasks names 2"),
    (["--file", "{held}"], "has several tasks (rte, stsb); name one with --tasks"),
])
def test_evaluate_file_refuses_bad_input_with_exit_2(run_dir, tmp_path, capsys, extra, message):
    held = tmp_path / "held.tsv"
    held.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    code, err = exit_code_and_error(evaluate, [run_dir, *[a.format(held=held) for a in extra]], capsys)
    assert code == 2 and message in err
