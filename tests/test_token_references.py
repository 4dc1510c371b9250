"""bench/token_references.py runs both arms (the toolkit and the Hugging Face reference) end to end on real slices."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def load_bench():
    sys.path.insert(0, str(BENCH))
    import token_references

    return token_references


def first_sentences(path: Path, n: int) -> str:
    """The first ``n`` sentences of a CoNLL file, its -DOCSTART- lines kept."""
    kept, sentences, inside = [], 0, False
    for line in path.read_text(encoding="utf-8").splitlines():
        kept.append(line)
        if line.strip() and not line.startswith("-DOCSTART-"):
            inside = True
        elif not line.strip() and inside:
            sentences, inside = sentences + 1, False
            if sentences == n:
                break
    return "\n".join(kept) + "\n"


@pytest.fixture
def small_data(tmp_path, data_dir):
    """A data root of 48 CoNLL-2003 train and 24 valid sentences and 2 SQuAD articles (10 paragraphs each), and squad.yaml carving 1."""
    root = tmp_path / "data"
    (root / "conll2003").mkdir(parents=True)
    (root / "conll2003" / "train.txt").write_text(first_sentences(data_dir / "conll2003" / "train.txt", 48))
    (root / "conll2003" / "valid.txt").write_text(first_sentences(data_dir / "conll2003" / "valid.txt", 24))
    squad = json.loads((data_dir / "squad" / "dev-v1.1-articles-00-37.json").read_text(encoding="utf-8"))
    articles = [{**a, "paragraphs": a["paragraphs"][:10]} for a in squad["data"][:2]]
    (root / "squad").mkdir()
    (root / "squad" / "dev-v1.1-articles-00-37.json").write_text(json.dumps({"version": "1.1", "data": articles}))
    defs = (ROOT / "task_defs" / "squad.yaml").read_text(encoding="utf-8")
    assert "size: 8" in defs
    (tmp_path / "squad.yaml").write_text(defs.replace("size: 8", "size: 1"))
    return root, tmp_path / "squad.yaml"


@pytest.mark.parametrize("task", ["conll2003", "squad"])
def test_both_arms_run_end_to_end_and_write_finite_scores(task, small_data, tmp_path, tiny_encoder, capsys):
    bench = load_bench()
    root, squad_defs = small_data
    out = tmp_path / "out"
    extra = ["--task-defs", str(squad_defs), "--limit-train-examples", "40",
                                                    "--limit-eval-examples", "32"] if task == "squad" else []
    code = bench.main(["--task", task, "--data-dir", str(root), "--encoder", tiny_encoder, "--epochs", "1",
                       "--accelerator", "cpu", "--batch-size", "8", "--output-dir", str(out), *extra])
    report = json.loads((out / f"token-references-{task}.json").read_text())
    assert code == 0, report
    for arm in ("mtdnn", "reference"):
        result = report[arm]
        assert math.isfinite(result["f1"]) and 0 <= result["f1"] <= 100 and result["best_epoch"] == 1
        assert len(result["epochs"]) == 1 and result["train_seconds"] > 0
        if task == "squad":
            assert 0 <= result["exact_match"] <= result["f1"] + 1e-9
        else:
            assert result["exact_match"] is None
    assert report["f1_difference"] == pytest.approx(report["mtdnn"]["f1"] - report["reference"]["f1"])
    assert report["within_target"] == (abs(report["f1_difference"]) <= 1.0)
    if task == "squad":  # both arms read the same carve: one article for dev, the other for training
        assert report["same_carve"] is True and len(report["mtdnn"]["carves"]["dev"]) == 1
        assert report["reference"]["train_rows"] == 40 and 0 < report["reference"]["eval_rows"] <= 32
    else:
        assert report["reference"]["train_rows"] == 48 and report["reference"]["eval_rows"] == 24
    table = capsys.readouterr().out
    assert f"| {task} | mtdnn |" in table and f"| {task} | reference |" in table


def stubbed_reference(small_data, tmp_path, tiny_encoder, monkeypatch):
    """The bench module with its reference arm stubbed (F1 12.5; each call recorded in ``trained``), the output
    directory and the flags of a 1-epoch CoNLL-2003 call: ``(bench, out, flags, trained)``."""
    bench = load_bench()
    root, _ = small_data
    out = tmp_path / "out"
    common = ["--task", "conll2003", "--data-dir", str(root), "--encoder", tiny_encoder, "--epochs", "1",
              "--accelerator", "cpu", "--batch-size", "8", "--output-dir", str(out)]
    trained = []
    monkeypatch.setattr(bench, "run_reference", lambda *a, **k: trained.append("reference") or
                        {"f1": 12.5, "exact_match": None, "best_epoch": 1, "epochs": [], "train_seconds": 1.0})
    return bench, out, common, trained


def test_arms_run_as_separate_calls_and_a_last_call_combines_them(small_data, tmp_path, tiny_encoder, monkeypatch):
    """Each arm's result is kept with its settings; a later call reuses it only for the same settings."""
    bench, out, common, trained = stubbed_reference(small_data, tmp_path, tiny_encoder, monkeypatch)
    assert bench.main([*common, "--arms", "mtdnn"]) == 0
    assert bench.main([*common, "--arms", "reference"]) == 0
    assert trained == ["reference"] and (out / "mtdnn-result.json").is_file()
    first = json.loads((out / "mtdnn-result.json").read_text())["result"]

    def no_training(*args, **kwargs):
        raise AssertionError("an arm with a kept result for the same settings was trained again")

    monkeypatch.setattr(bench, "run_mtdnn", no_training)
    assert bench.main(common) == 0
    report = json.loads((out / "token-references-conll2003.json").read_text())
    assert report["mtdnn"] == first and report["reference"]["f1"] == 12.5 and trained == ["reference"]
    assert report["f1_difference"] == pytest.approx(first["f1"] - 12.5)
    with pytest.raises(AssertionError, match="trained again"):  # other settings: the kept result does not apply
        bench.main([*common, "--lr", "1e-4"])
    with pytest.raises(AssertionError, match="trained again"):  # --rerun: trains even with the same settings
        bench.main([*common, "--rerun"])

def test_the_reference_trains_on_the_toolkit_s_own_pieces_and_windows(small_data, tokenizer):
    """The reference's run_ner labels and run_qa windows equal the toolkit's tokenization of the same examples."""
    sys.path.insert(0, str(BENCH))
    from hf_reference import ReferenceSettings, qa_features, tagging_features

    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.tasktypes.spans.features import tokenize_qa
    from mtdnn.tasktypes.tagging.features import tokenize_sentences

    root, squad_defs = small_data
    conll = load_task_defs(ROOT / "task_defs" / "ner.yaml")["conll2003"]
    sentences = load_split(conll, "train", root).examples
    ours, theirs = tokenize_sentences(sentences, tokenizer, 256), tagging_features(sentences, tokenizer, 256)
    assert theirs["input_ids"] == ours["input_ids"] and theirs["labels"] == ours["piece_labels"]
    assert any(row.count(-100) > 2 for row in ours["piece_labels"])  # words of several pieces are in there

    squad = load_task_defs(squad_defs)["squad"]
    questions = load_split(squad, "train", root).examples
    settings = ReferenceSettings(encoder="unused", epochs=1, lr=5e-5, batch_size=8, eval_batch_size=8,
                                 warmup_ratio=0.1, weight_decay=0.01, gradient_clip=1.0, max_length=96, seed=0,
                                 doc_stride=32)
    ours, theirs = tokenize_qa(questions, tokenizer, 96, 32), qa_features(questions, tokenizer, settings)
    assert len(ours["input_ids"]) > len(questions)  # contexts longer than a window: several windows each
    assert theirs["input_ids"] == ours["input_ids"] and theirs["example_id"] == ours["example_id"]
    assert [list(p) for p in zip(theirs["start_positions"], theirs["end_positions"])] == ours["label"]
    assert any(s > 0 for s in theirs["start_positions"]) and any(s == 0 for s in theirs["start_positions"])


def test_summary_over_seeds_hand_computed_and_bad_reports_exit_2(tmp_path, capsys):
    bench = load_bench()
    settings = {"encoder": "e", "lr": 5e-5}

    def report(seed, mtdnn_f1, reference_f1, task="wnut17", lr=5e-5):
        return {"task": task, "seed": seed, "settings": {**settings, "lr": lr, "seed": seed},
                "mtdnn": {"f1": mtdnn_f1, "exact_match": None}, "reference": {"f1": reference_f1, "exact_match": None}}

    paths = []
    for seed, m, r in [(42, 44.0, 41.0), (43, 40.0, 42.0), (44, 42.0, 40.0)]:
        paths.append(tmp_path / f"{seed}.json")
        paths[-1].write_text(json.dumps(report(seed, m, r)))
    out = tmp_path / "summary.json"
    assert bench.main(["summary", *map(str, paths), "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["seeds"] == [42, 43, 44]
    assert summary["mtdnn"]["f1"]["mean"] == pytest.approx(42.0) and summary["mtdnn"]["f1"]["sd"] == pytest.approx(2.0)
    assert summary["reference"]["f1"]["mean"] == pytest.approx(41.0)
    assert summary["reference"]["f1"]["sd"] == pytest.approx(1.0)
    assert summary["f1_difference"]["values"] == [3.0, -2.0, 2.0]  # paired by seed
    assert summary["f1_difference"]["mean"] == pytest.approx(1.0) and summary["within_target"] is True
    assert "42.00 ± 2.00 (44.00, 40.00, 42.00)" in capsys.readouterr().out
    for bad in [report(42, 1.0, 1.0), report(45, 1.0, 1.0, task="conll2003"), report(45, 1.0, 1.0, lr=1e-4),
                {k: v for k, v in report(45, 1.0, 1.0).items() if k != "reference"}]:
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        assert bench.main(["summary", str(paths[0]), str(tmp_path / "bad.json"), "--json",
                           str(tmp_path / "no.json")]) == 2
        assert not (tmp_path / "no.json").exists()
    assert "error:" in capsys.readouterr().err


def test_an_ablation_of_the_toolkit_arm_reuses_the_reference(small_data, tmp_path, tiny_encoder, monkeypatch):
    """--no-mtdnn-group-by-length and --mtdnn-token-loss train a variant of the toolkit's arm beside the kept
    reference: the run's config says so, the reference is not trained again, the plain report is kept."""
    import yaml

    bench, out, common, trained = stubbed_reference(small_data, tmp_path, tiny_encoder, monkeypatch)
    assert bench.main([*common, "--arms", "reference"]) == 0
    assert bench.main([*common, "--no-mtdnn-group-by-length", "--mtdnn-token-loss",
                       "token_cross_entropy_per_piece"]) == 0
    assert trained == ["reference"]
    variant = "mtdnn-random-batches-token_cross_entropy_per_piece"
    config = yaml.safe_load((out / variant / "config.yaml").read_text())
    assert config["group_by_length"] is False
    assert config["resolved"]["tasks"]["conll2003"]["loss"] == "token_cross_entropy_per_piece"
    report = json.loads((out / f"token-references-conll2003-{variant[len('mtdnn-'):]}.json").read_text())
    assert report["mtdnn_options"] == {"group_by_length": False, "token_loss": "token_cross_entropy_per_piece"}
    assert report["reference"]["f1"] == 12.5 and math.isfinite(report["mtdnn"]["f1"])
    assert not (out / "mtdnn-result.json").exists() and (out / f"{variant}-result.json").is_file()
