"""Few-shot transfer: stratified nested subsets, the sweep on real data slices with a tiny encoder, bad input."""

import json
import random
import statistics
from pathlib import Path

import pytest
import torch

from mtdnn.errors import ConfigError, DataError, run_cli
from mtdnn.tasks.subsets import check_sizes, class_counts, sizes_from_fractions, stratified_order
from mtdnn.transfer import main

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")
NLI = str(ROOT / "task_defs" / "nli.yaml")

pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*")  # raised inside Lightning, once per Trainer


def shuffled(counts: list[int], seed: int = 0) -> list[int]:
    labels = [c for c, n in enumerate(counts) for _ in range(n)]
    random.Random(seed).shuffle(labels)
    return labels


# ------------------------------------------------------------------------------------------------ subsets


@pytest.mark.parametrize("counts", [[562, 554, 550], [657, 647], [842, 1284], [300, 120, 60], [7, 5, 3]])
def test_every_prefix_is_stratified_within_one_example(counts):
    labels = shuffled(counts)
    total = len(labels)
    for seed in (0, 1, 2):
        order = stratified_order(labels, seed)
        assert sorted(order) == list(range(total))
        seen = [0] * len(counts)
        for k, i in enumerate(order, start=1):
            seen[labels[i]] += 1
            if k >= len(counts):
                assert min(seen) >= 1, (k, seen)  # every class in every subset of at least C examples
                for c, n in enumerate(counts):
                    assert abs(seen[c] - k * n / total) < 1, (seed, k, c, seen)


def test_a_rare_class_is_in_every_subset_of_at_least_as_many_examples_as_classes():
    labels = shuffled([500, 3, 40])
    order = stratified_order(labels, 5)
    assert set(labels[i] for i in order[:3]) == {0, 1, 2}
    assert class_counts(labels, order[:3]) == {0: 1, 1: 1, 2: 1}


def test_subsets_nest_and_orders_are_deterministic_per_seed():
    labels = shuffled([562, 554, 550])
    first = stratified_order(labels, 0)
    torch.manual_seed(1234)  # the global RNG must not matter
    assert stratified_order(labels, 0) == first
    assert stratified_order(labels, 1) != first
    assert set(stratified_order(labels, 1)[:200]) != set(first[:200])
    for small, large in [(50, 200), (200, 549), (549, 1666)]:
        assert set(first[:small]) <= set(first[:large])


def test_sizes_from_fractions_and_size_checks():
    assert sizes_from_fractions([0.001, 0.01, 0.1, 1.0], 1666) == [2, 17, 167, 1666]
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match=r"not in \(0, 1\]"):
            sizes_from_fractions([bad], 1666)
    check_sizes([3, 1666], 1666, 3)
    with pytest.raises(ConfigError, match="more than the 1666 in the pool"):
        check_sizes([1667], 1666, 3)
    with pytest.raises(ConfigError, match="one example of each of the 3 classes"):
        check_sizes([2], 1666, 3, {2: "--fractions 0.001"})


def test_drop_labels_removes_and_counts_rows_but_other_bad_labels_still_fail(tmp_path):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import parse_tasks

    (tmp_path / "nli.tsv").write_text("s1\ts2\tgold_label\na\tb\tentailment\nc\td\t-\ne\tf\tcontradiction\n")
    (tmp_path / "bad.tsv").write_text("s1\ts2\tgold_label\na\tb\tentailment\nc\td\tmaybe\n")
    body = {"type": "classification", "text": ["s1", "s2"], "label": "gold_label",
            "labels": ["entailment", "neutral", "contradiction"], "drop_labels": ["-"],
            "splits": {"train": {"path": "nli.tsv"}, "dev": {"path": "bad.tsv"}}}
    task = parse_tasks({"tasks": {"t": body}}, "t.yaml")["t"]
    raw = load_split(task, "train", tmp_path)
    assert [ex.label for ex in raw.examples] == [0, 2] and raw.dropped == 1
    with pytest.raises(DataError, match="line 3.*'maybe'"):
        load_split(task, "dev", tmp_path)
    with pytest.raises(ConfigError, match="overlaps 'labels'"):
        parse_tasks({"tasks": {"t": {**body, "drop_labels": ["neutral"]}}}, "t.yaml")


def test_encoder_labels_default_to_names_and_run_directories(tmp_path):
    from mtdnn.evaluation.transfer import parse_encoder_list

    (tmp_path / "glue-mt" / "export").mkdir(parents=True)
    run, export = tmp_path / "glue-mt", tmp_path / "glue-mt" / "export"
    assert parse_encoder_list(f"packaged-minilm, base=bert-base-uncased,{run}") == [
        ("packaged-minilm", "packaged-minilm"), ("base", "bert-base-uncased"), ("glue-mt", str(run))]
    assert parse_encoder_list(str(export)) == [("glue-mt", str(export))]
    with pytest.raises(ConfigError, match="used twice"):
        parse_encoder_list(f"{run},{export}")


# ------------------------------------------------------------------------------------------------ the sweep


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory, tiny_encoder):
    """A stand-in for a finished multi-task run: the tiny encoder exported with untrained mnli and rte heads."""
    from mtdnn.training.export import export_model
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    tasks = select_tasks(load_task_defs(NLI), ["mnli", "rte"], NLI)
    torch.manual_seed(7)
    model = MultiTaskModel(load_encoder(tiny_encoder), tasks)
    run_dir = tmp_path_factory.mktemp("runs") / "nli-mt"
    export_model(model, load_tokenizer(tiny_encoder), tasks, run_dir / "export", source_encoder=tiny_encoder)
    best = {"epoch": 1, "checkpoint": "checkpoints/best.ckpt", "tasks": {}, "average": 0.0}
    (run_dir / "metrics.json").write_text(json.dumps({"status": "complete", "epochs": [], "best": best}))
    return run_dir


def sweep_args(data_dir, out_dir, encoders, *extra):
    return ["--task", "snli", "--task-defs", GLUE, "--encoders", encoders, "--data-dir", str(data_dir),
            "--output-dir", str(out_dir), "--accelerator", "cpu", *extra]


@pytest.fixture(scope="module")
def snli_sweep(tmp_path_factory, data_dir, tiny_encoder, mt_run):
    out_dir = tmp_path_factory.mktemp("transfer") / "snli"
    args = sweep_args(data_dir, out_dir, f"tiny={tiny_encoder},{mt_run}", "--sizes", "6,12", "--seeds", "2",
                      "--limit-eval-examples", "48", "--reuse-head", "mnli", "--note", "a note for the report")
    assert main(args) == 0
    return out_dir, args


def test_results_json_holds_per_seed_accuracies_mean_and_std(snli_sweep):
    out_dir, _ = snli_sweep
    report = json.loads((out_dir / "results.json").read_text())
    assert report["seeds"] == [0, 1] and [s["n_examples"] for s in report["sizes"]] == [6, 12]
    assert report["pool"]["split"] == "train" and report["pool"]["examples"] == 1666
    assert report["pool"]["class_counts"] == {"entailment": 562, "neutral": 554, "contradiction": 550}
    assert report["evaluation"] == {**report["evaluation"], "split": "dev", "examples": 48, "split_examples": 9842}
    assert report["settings"]["epochs"] == 3 and report["settings"]["lr"] == 5e-5
    assert "fewer than 1000" in report["settings"]["batch_size_rule"]
    assert [e["label"] for e in report["encoders"]] == ["tiny", "nli-mt"]
    run = report["encoders"][1]
    assert run["kind"] == "run" and "mnli" in run["head"] and set(run["trained_on"]) == {"mnli", "rte"}
    assert report["encoders"][0]["head"] == "fresh"
    assert "a note for the report" in report["notes"] and any("SMOKE TEST" in n for n in report["notes"])
    for label in ("tiny", "nli-mt"):
        rows = report["results"][label]
        assert [r["n_examples"] for r in rows] == [6, 12] and [r["batch_size"] for r in rows] == [8, 8]
        for row in rows:
            assert len(row["accuracies"]) == 2 and all(0 <= a <= 1 for a in row["accuracies"])
            assert all(a * 48 == pytest.approx(round(a * 48)) for a in row["accuracies"])  # k of 48 correct
            assert row["mean"] == pytest.approx(statistics.fmean(row["accuracies"]))
            assert row["std"] == pytest.approx(statistics.stdev(row["accuracies"]))


def test_every_encoder_sees_the_same_nested_stratified_subsets(snli_sweep, data_dir):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    out_dir, _ = snli_sweep
    ids = {}
    for label in ("tiny", "nli-mt"):
        for k in (6, 12):
            for seed in (0, 1):
                record = json.loads((out_dir / "per_run" / label / f"n{k}-seed{seed}.json").read_text())
                assert record["steps"] == 3 * -(-k // 8)  # 3 epochs at batch 8
                ids[label, k, seed] = record["example_ids"]
    for k in (6, 12):
        for seed in (0, 1):
            assert ids["tiny", k, seed] == ids["nli-mt", k, seed]
    for seed in (0, 1):
        assert ids["tiny", 12, seed][:6] == ids["tiny", 6, seed]
    assert set(ids["tiny", 12, 0]) != set(ids["tiny", 12, 1])
    labels = [ex.label for ex in load_split(load_task_defs(GLUE)["snli"], "train", data_dir).examples]
    for seed in (0, 1):  # 562 / 554 / 550 examples: 2 of each class in 6, 4 of each in 12
        assert class_counts(labels, [int(i) for i in ids["tiny", 6, seed]]) == {0: 2, 1: 2, 2: 2}
        assert class_counts(labels, [int(i) for i in ids["tiny", 12, seed]]) == {0: 4, 1: 4, 2: 4}


def test_markdown_table_and_png_are_written(snli_sweep):
    out_dir, _ = snli_sweep
    report = json.loads((out_dir / "results.json").read_text())
    md = (out_dir / "results.md").read_text()
    assert "| encoder | n = 6 (0.36% of pool) | n = 12 (0.72% of pool) |" in md
    row = report["results"]["tiny"][0]
    assert f"| tiny | {100 * row['mean']:.1f} ± {100 * row['std']:.1f} |" in md
    assert "batch 8 when the subset has fewer than 1000 examples, else 32" in md
    png = (out_dir / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not list(out_dir.glob("*.tmp"))


def test_an_interrupted_sweep_resumes_from_finished_runs(snli_sweep, monkeypatch, capsys):
    import mtdnn.evaluation.transfer.sweep

    out_dir, args = snli_sweep
    before = json.loads((out_dir / "results.json").read_text())

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(mtdnn.evaluation.transfer.sweep, "fine_tune", no_training)
    assert main(args) == 0
    assert "kept from an earlier run" in capsys.readouterr().out
    assert json.loads((out_dir / "results.json").read_text())["results"] == before["results"]


def test_fine_tune_learns_its_subset_and_evaluate_scores_it(data_dir, tiny_encoder, tokenizer):
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.evaluation.transfer import Encoder, TransferSettings, evaluate_split, fine_tune

    snli = load_task_defs(GLUE)["snli"]
    pool = tokenized_split(snli, "train", data_dir, tokenizer)
    subset = pool.subset(stratified_order(pool.labels, 0)[:12])
    untrained = MultiTaskModel(load_encoder(tiny_encoder), {"snli": snli})
    before = evaluate_split(untrained, snli, subset, tokenizer.pad_token_id, batch_size=5)
    encoder = Encoder("tiny", tiny_encoder, "huggingface", tiny_encoder)
    module, trainer = fine_tune(encoder, snli, subset, tokenizer, TransferSettings(train={"max_epochs": 50, "lr": 2e-3}), seed=0,
                                accelerator="cpu")
    assert trainer.global_step == 50 * 2  # 12 examples at batch 8
    after = evaluate_split(module.model, snli, subset, tokenizer.pad_token_id, batch_size=5)
    assert after["accuracy"] == 1.0 > before["accuracy"]  # the path from subset to score learns what it is given


def test_reused_head_starts_from_the_runs_weights(mt_run):
    from safetensors.torch import load_file

    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.evaluation.transfer import reused_head_state

    snli = load_task_defs(GLUE)["snli"]
    state = reused_head_state(mt_run / "export", "mnli", snli)
    saved = load_file(str(mt_run / "export" / "heads.safetensors"))
    assert set(state) == {"out.weight", "out.bias"} and torch.equal(state["out.weight"], saved["mnli.out.weight"])


def test_scitail_one_seed_pools_dev_and_scores_test(tmp_path, data_dir, tiny_encoder):
    out_dir = tmp_path / "scitail"
    args = ["--task", "scitail", "--task-defs", GLUE, "--encoders", tiny_encoder, "--data-dir", str(data_dir),
            "--output-dir", str(out_dir), "--accelerator", "cpu", "--sizes", "4", "--fractions", "0.005",
            "--seeds", "1", "--limit-eval-examples", "32"]
    assert main(args) == 0
    report = json.loads((out_dir / "results.json").read_text())
    assert report["pool"]["split"] == "dev" and report["pool"]["examples"] == 1304
    assert report["evaluation"]["split"] == "test" and report["evaluation"]["split_examples"] == 2126
    assert [s["n_examples"] for s in report["sizes"]] == [4, 7]  # round(0.005 * 1304) = 7
    assert "--fractions 0.005" in report["sizes"][1]["asked_as"]
    assert any("no train split" in n for n in report["notes"])
    for row in report["results"][report["encoders"][0]["label"]]:
        assert row["std"] is None and len(row["accuracies"]) == 1
    md = (out_dir / "results.md").read_text()
    assert "±" not in md.split("## Set-up")[0].split("|---|")[1] and "one seed" in md
    assert (out_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--fractions", "0"], "(0, 1]"),
        (["--fractions", "1.5"], "(0, 1]"),
        (["--sizes", "5000"], "more than the 1666 in the pool"),
        (["--sizes", "2"], "one example of each of the 3 classes"),
        (["--sizes", "6", "--eval-split", "train"], "must not be trained on"),
        (["--sizes", "6", "--pool-split", "test"], "has no split 'test'"),
        (["--sizes", "6", "--encoders", "no-such-dir/no-such-encoder"], "cannot load"),
        (["--sizes", "6", "--reuse-head", "rte"], "labels ['entailment', 'not_entailment'] vs"),
        (["--sizes", "6", "--reuse-head"], "no head for task 'snli'"),
        (["--sizes", "6", "--reuse-head", "mnli", "--encoders", "packaged-minilm"], "none of the encoders is a run"),
        (["--sizes", "6", "--task", "stsb"], "needs a classification task"),
        (["--sizes", "6", "--precision", "64-bogus"], "Lightning rejects --accelerator cpu --precision 64-bogus"),
    ],
)
def test_bad_input_exits_2_before_training(tmp_path, data_dir, tiny_encoder, mt_run, capsys, extra, message):
    args = sweep_args(data_dir, tmp_path / "out", f"{tiny_encoder},{mt_run}")
    for flag in ("--encoders", "--task"):
        if flag in extra:
            i = extra.index(flag)
            args[args.index(flag) + 1] = extra[i + 1]
            extra = extra[:i] + extra[i + 2:]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, args + extra)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_smoke_test_says_so_first_and_the_report_has_chance(snli_sweep, data_dir):
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    out_dir, _ = snli_sweep
    report = json.loads((out_dir / "results.json").read_text())
    labels = [ex.label for ex in load_split(load_task_defs(GLUE)["snli"], "dev", data_dir).examples[:48]]
    majority = max(set(labels), key=labels.count)
    assert report["chance"]["value"] == pytest.approx(labels.count(majority) / 48)
    assert report["smoke_test"] == ["only the first 48 of the 9842 evaluation examples were scored "
                                    "(--limit-eval-examples)"]
    md = (out_dir / "results.md").read_text()
    assert md.splitlines()[2].startswith("**SMOKE TEST**, not a measurement: only the first 48")


def test_an_encoder_from_a_limited_run_is_flagged(tmp_path, mt_run, caplog):
    import shutil

    from mtdnn.evaluation.transfer.encoders import resolve_encoder_spec
    from mtdnn.evaluation.transfer.report import chance_level
    from mtdnn.tasks.taskdef import load_task_defs

    limited = tmp_path / "limited-run"
    shutil.copytree(mt_run, limited)
    (limited / "config.yaml").write_text("limit_train_examples: 64\nmax_steps: null\nlimit_eval_examples: 32\n")
    task = load_task_defs(GLUE)["snli"]
    encoder = resolve_encoder_spec("lim", str(limited), task, None)
    assert encoder.limited == {"limit_train_examples": 64, "limit_eval_examples": 32}
    assert resolve_encoder_spec("full", str(mt_run), task, None).limited == {}  # no config.yaml: nothing known
    assert chance_level("mcc", [0, 1], ["a", "b"]) == {"value": 0.0, "what": "MCC of a constant prediction"}
    assert chance_level("f1", [0, 1], ["a", "b"]) is None
