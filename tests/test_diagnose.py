"""Diagnostics: cue statistics, HANS, adversarial ARCT, partial-input baselines and the report."""

import csv
import json
import math
import re
import tracemalloc
from pathlib import Path

import pytest
import yaml

from mtdnn.errors import ConfigError, DataError, run_cli
from mtdnn.evaluation.diagnostics import arct, cues, hans, hans_file, partial_input
from mtdnn.cli import diagnose
from mtdnn.tasks.data import Example, load_split
from mtdnn.tasks.tokenized import tokenize_examples
from mtdnn.tasks.taskdef import load_task_defs, parse_tasks
from mtdnn import train

ROOT = Path(__file__).resolve().parents[1]
GLUE = load_task_defs(ROOT / "task_defs" / "glue.yaml")
ARCT = load_task_defs(ROOT / "task_defs" / "arct.yaml")


def diagnose_main(args) -> int:
    return diagnose.main([str(a) for a in args])


def exit_code_and_error(args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(diagnose.main, [str(a) for a in args])
    return exit_info.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_dir, tiny_encoder):
    """A complete 1-epoch tiny-encoder run of rte (2-class NLI head) and arct (ranking head)."""
    root = tmp_path_factory.mktemp("diagnose")
    defs = {"tasks": {"rte": {k: v for k, v in GLUE["rte"].to_plain().items() if k != "name"},
                      "arct": {k: v for k, v in ARCT["arct"].to_plain().items() if k != "name"}}}
    (root / "tasks.yaml").write_text(yaml.safe_dump(defs))
    assert train.main([str(root / "tasks.yaml"), "--tasks", "rte,arct", "--data-dir", str(data_dir),
                       "--encoder", tiny_encoder, "--limit-train-examples", "32", "--batch-size", "16",
                       "--max-epochs", "1", "--accelerator", "cpu", "--output-dir", str(root / "run")]) == 0
    return root / "run"


# ----------------------------------------------------------------------------------------------- cue statistics


def test_tokens_split_off_the_negation_contraction():
    assert cues.cue_tokens("Doesn't it WORK? Can't.") == ["does", "n't", "it", "work", "ca", "n't"]
    assert cues.cue_tokens("isn't", negation_as_not=True) == ["is", "not"]
    assert cues.cues_of("it is not good", 2) == {"it is", "is not", "not good"}


def test_warrant_cues_hand_computed():
    examples = [Example("a", 1, "", candidates=["it is not good", "it is good"], label=0),  # not: in w0, right
                Example("b", 2, "", candidates=["people do", "people do not"], label=0),  # not: in w1, wrong
                Example("c", 3, "", candidates=["x not", "y not"], label=1),              # not in both: n/a
                Example("d", 4, "", candidates=["a", "b not"], label=1)]                  # not: in w1, right
    stats = cues.warrant_cue_stats(examples, 1)
    assert (stats["not"].applicability, stats["not"].productive) == (3, 2)
    assert stats["not"].productivity == pytest.approx(2 / 3) and stats["not"].coverage == pytest.approx(3 / 4)
    assert "good" not in stats and "is" not in stats  # in both warrants
    assert (stats["y"].productivity, stats["x"].productivity) == (1.0, 0.0)
    either = cues.warrant_cue_stats(examples, 1, applicability="any")["not"]  # also the point with "not" twice
    assert (either.applicability, either.productive, either.productivity, either.coverage) == (4, 2, 0.5, 1.0)
    bigrams = cues.warrant_cue_stats(examples, 2)
    assert bigrams["is not"].applicability == 1 and bigrams["is not"].productivity == 1.0
    assert bigrams["do not"].productivity == 0.0 and bigrams["do not"].coverage == 0.25


def test_hypothesis_cues_and_pmi_hand_computed():
    labels = ["entailment", "neutral", "contradiction"]
    examples = [Example("0", 1, "p", "a cat sleeps", label=2), Example("1", 2, "p", "a dog sleeps", label=2),
                Example("2", 3, "p", "a cat runs", label=0), Example("3", 4, "p", "the dog runs", label=1)]
    raw = cues.hypothesis_cue_stats(examples, labels, 1, smoothing=0)
    assert (raw["sleeps"].applicability, raw["sleeps"].productivity, raw["sleeps"].coverage) == (2, 1.0, 0.5)
    assert raw["sleeps"].label == "contradiction"
    assert raw["a"].productivity == pytest.approx(2 / 3) and raw["a"].coverage == pytest.approx(0.75)
    # label totals over cues: entailment 3, neutral 3, contradiction 6; grand total 12
    assert raw["sleeps"].pmi["contradiction"] == pytest.approx(math.log(2 * 12 / (2 * 6)))
    assert raw["a"].pmi["entailment"] == pytest.approx(math.log(1 * 12 / (3 * 3)))
    assert raw["sleeps"].pmi["entailment"] == -math.inf
    smoothed = cues.hypothesis_cue_stats(examples, labels, 1, smoothing=1)  # 6 cues x 3 labels, +1 each
    assert smoothed["sleeps"].pmi["contradiction"] == pytest.approx(math.log(3 * 30 / (5 * 12)))


@pytest.mark.data
def test_niven_and_kao_not_cue_is_reproduced_within_0_02(data_dir):
    """Their Table 2: "not" has productivity 0.61 and coverage 0.64 (train, dev and test pooled)."""
    task = ARCT["arct"]
    pooled = [ex for split in ("train", "dev", "test") for ex in load_split(task, split, data_dir).examples]
    paper = cues.warrant_cue_stats(pooled, 1, negation_as_not=True, applicability="any")["not"]
    assert abs(paper.productivity - 0.61) <= 0.02 and abs(paper.coverage - 0.64) <= 0.02
    stated = cues.warrant_cue_stats(pooled, 1)["not"]  # eq. 1 as written, "n't" apart: a third of the points
    assert 0.3 < stated.coverage < 0.4


@pytest.mark.data
def test_cue_command_on_arct_and_snli(data_dir, tmp_path, capsys):
    assert diagnose_main(["cues", "--task", "arct", "--data-dir", data_dir, "--splits", "dev",
                          "--output-dir", tmp_path]) == 0
    result = json.loads((tmp_path / "diagnose-cues-arct.json").read_text())
    assert result["kind"] == "warrants" and "eq. 1" in result["definitions"]["applicability"]
    not_cue = result["splits"]["dev"]["unigram"]["selected"]["not"]
    raw = load_split(ARCT["arct"], "dev", data_dir)
    expected = sum(("not" in cues.cue_tokens(ex.candidates[0])) != ("not" in cues.cue_tokens(ex.candidates[1]))
                   for ex in raw.examples)
    assert not_cue["applicability"] == expected and not_cue["coverage"] == pytest.approx(expected / 316)
    assert "applicability" in (tmp_path / "diagnose-cues-arct.md").read_text()
    capsys.readouterr()
    assert diagnose_main(["cues", "--task", "snli", "--data-dir", data_dir, "--splits", "train",
                          "--output-dir", tmp_path]) == 0
    snli = json.loads((tmp_path / "diagnose-cues-snli.json").read_text())["splits"]["train"]
    assert snli["n"] == 1666 and set(snli["unigram"]["top_by_label"]) == {"entailment", "neutral", "contradiction"}
    assert "PMI" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- HANS


def test_label_mapping_from_names_overrides_and_errors():
    assert hans.entailment_label_map(GLUE["rte"]) == {"entailment": "entailment", "not_entailment": "non-entailment"}
    assert hans.entailment_label_map(GLUE["mnli"]) == {"entailment": "entailment", "neutral": "non-entailment",
                                                       "contradiction": "non-entailment"}
    with pytest.raises(ConfigError, match="'0', '1'.*--label-map"):
        hans.entailment_label_map(GLUE["wnli"])
    overrides = hans.parse_label_map("0=non-entailment,1=entailment")
    assert hans.entailment_label_map(GLUE["wnli"], overrides) == {"0": "non-entailment", "1": "entailment"}
    no_entailment = parse_tasks({"tasks": {"nc": {"type": "classification", "splits": {}, "text": ["p", "h"],
                                                  "label": "y", "labels": ["neutral", "contradiction"]}}}, "x.yaml")
    with pytest.raises(ConfigError, match="task 'nc' has no entailment label"):
        hans.entailment_label_map(no_entailment["nc"])
    with pytest.raises(ConfigError, match="'maybe'"):
        hans.parse_label_map("0=maybe")
    with pytest.raises(ConfigError, match="no label 'x'"):
        hans.entailment_label_map(GLUE["rte"], {"x": "entailment"})


@pytest.mark.data
def test_hans_on_a_run_names_what_is_missing(run_dir, data_dir, capsys):
    code, err = exit_code_and_error(["hans", run_dir, "--task", "arct", "--data-dir", data_dir], capsys)
    assert code == 2 and "task 'arct': HANS needs a classification task over premise and hypothesis" in err
    code, err = exit_code_and_error(["hans", run_dir, "--task", "rte", "--label-map", "entailment=non-entailment,"
                                     "not_entailment=non-entailment", "--data-dir", data_dir], capsys)
    assert code == 2 and "task 'rte' has no entailment label" in err
    assert not (run_dir / "diagnose" / "diagnose-hans.json").exists()
    code, err = exit_code_and_error(["hans", "--data-dir", data_dir], capsys)
    assert code == 2 and "give a MODEL (run or export) or --rule" in err


def test_per_heuristic_accuracy_hand_computed():
    rows = [hans_file.HansExample("p", "h", "entailment", "lexical_overlap", "le_a", 1),
            hans_file.HansExample("p", "h", "entailment", "lexical_overlap", "le_a", 2),
            hans_file.HansExample("p", "h", "non-entailment", "lexical_overlap", "ln_b", 3),
            hans_file.HansExample("p", "h", "non-entailment", "subsequence", "sn_c", 4),
            hans_file.HansExample("p", "x", "non-entailment", "subsequence", "sn_c", 5)]
    predict = lambda batch: ["non-entailment" if ex.hypothesis == "x" else "entailment" for ex in batch]  # noqa: E731
    summary = hans.summarise(hans.score_hans(rows, predict, batch_size=2))
    lo, sub = summary["by_heuristic"]["lexical_overlap"], summary["by_heuristic"]["subsequence"]
    assert (lo["entailment"]["accuracy"], lo["non-entailment"]["accuracy"], lo["all"]["accuracy"]) == (1.0, 0.0, 2 / 3)
    assert sub["non-entailment"] == {"accuracy": 0.5, "correct": 1, "n": 2} and sub["entailment"]["accuracy"] is None
    assert summary["overall"] == {"accuracy": 3 / 5, "correct": 3, "n": 5}
    assert summary["by_subcase"]["sn_c"]["accuracy"] == 0.5 and summary["by_subcase"]["le_a"]["n"] == 2


@pytest.mark.data
def test_hans_sample_with_the_word_overlap_rule(data_dir, tmp_path, capsys):
    assert diagnose_main(["hans", "--rule", "word-overlap", "--data-dir", data_dir, "--output-dir", tmp_path]) == 0
    result = json.loads((tmp_path / "diagnose-hans.json").read_text())
    overlap = result["summary"]["by_heuristic"]["lexical_overlap"]
    assert overlap["entailment"]["accuracy"] >= 0.99 and overlap["non-entailment"]["accuracy"] <= 0.01
    assert result["examples"] == 600 and result["layout"] == "sample"
    assert "inferred from block order" in result["heuristic_source"]
    assert len(result["summary"]["by_subcase"]) == 30
    assert (tmp_path / "diagnose-hans.png").stat().st_size > 1000
    assert "lexical_overlap" in capsys.readouterr().out


def _released(path: Path, rows: list[list[str]], columns=("gold_label", "sentence1", "sentence2", "pairID",
                                                          "heuristic", "subcase", "template")) -> Path:
    path.write_text("\n".join("\t".join(r) for r in [list(columns)] + rows) + "\n")
    return path


def test_released_layout_is_read_by_column_name_and_bad_files_exit_2(tmp_path, capsys):
    good = _released(tmp_path / "hans.txt", [
        ["entailment", "The doctor saw the cat .", "The doctor saw the cat .", "ex0", "lexical_overlap", "le_x", "t1"],
        ["non-entailment", "The doctor saw the cat .", "The cat saw the doctor .", "ex1", "lexical_overlap", "ln_y", "t2"],
        ["non-entailment", "The doctor ran .", "The lawyer ran .", "ex2", "constituent", "cn_z", "t3"]])
    assert diagnose_main(["hans", "--rule", "word-overlap", "--hans", good, "--output-dir", tmp_path / "out"]) == 0
    result = json.loads((tmp_path / "out" / "diagnose-hans.json").read_text())
    assert result["layout"] == "released" and result["heuristic_source"].startswith("the file's")
    assert result["summary"]["by_heuristic"]["constituent"]["non-entailment"]["accuracy"] == 1.0

    no_heuristic = _released(tmp_path / "nh.txt", [["entailment", "a", "a", "ex0", "le_x", "t"]],
                             columns=("gold_label", "sentence1", "sentence2", "pairID", "subcase", "template"))
    code, err = exit_code_and_error(["hans", "--rule", "word-overlap", "--hans", no_heuristic], capsys)
    assert code == 2 and "nh.txt" in err and "'heuristic' is not in the header" in err
    neutral = _released(tmp_path / "neutral.txt", [
        ["entailment", "a", "a", "ex0", "lexical_overlap", "le_x", "t"],
        ["neutral", "a", "b", "ex1", "lexical_overlap", "ln_x", "t"]])
    code, err = exit_code_and_error(["hans", "--rule", "word-overlap", "--hans", neutral,
                                     "--output-dir", tmp_path / "bad"], capsys)
    assert code == 2 and "neutral.txt: line 3: field 'gold_label': 'neutral'" in err
    assert not (tmp_path / "bad").exists()  # nothing half-written
    headerless = tmp_path / "sample.txt"
    headerless.write_text("a\tb\t0\n")
    code, err = exit_code_and_error(["hans", "--rule", "word-overlap", "--hans", headerless], capsys)
    assert code == 2 and "sample_index.tsv" in err


def test_hans_with_a_model_streams_30000_rows_in_flat_memory(tiny_encoder, tmp_path):
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.training.inference import LoadedModel

    task = GLUE["rte"]
    loaded = LoadedModel(MultiTaskModel(load_encoder(tiny_encoder), {"rte": task}).eval(),
                         load_tokenizer(tiny_encoder), {"rte": task}, tmp_path, "tiny")
    words = ["doctor", "lawyer", "cat", "saw", "helped", "the", "artist", "near", "who", "slept"]
    with (tmp_path / "big.txt").open("w") as f:
        f.write("gold_label\tsentence1\tsentence2\theuristic\tsubcase\n")
        for i in range(30_000):
            premise = " ".join(words[(i + k) % 10] for k in range(5))
            f.write(f"{'entailment' if i % 2 else 'non-entailment'}\t{premise}\t{premise[:12]}\t"
                    f"{hans_file.HEURISTICS[i % 3]}\tcase{i % 30}\n")
    inner = hans.model_predictor(loaded, task, hans.entailment_label_map(task))
    seen, current = [], []

    def predict(batch):
        seen.append(len(batch))
        out = inner(batch)
        current.append(tracemalloc.get_traced_memory()[0])
        return out

    tracemalloc.start()
    try:
        result = hans.hans_diagnosis(hans_file.open_hans(tmp_path / "big.txt"), predict, "tiny", batch_size=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["examples"] == 30_000 and max(seen) == 1000 and len(seen) == 30
    growth = current[-1] - current[4]  # Python memory held after batch 5 and after batch 30
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 25 batches"
    assert peak < 8 * 1024 * 1024  # the 30,000 rows as Python objects alone would take more


# ----------------------------------------------------------------------------------------------- adversarial ARCT


@pytest.mark.data
def test_adversarial_dev_pairs_by_id_with_flipped_labels(data_dir):
    raw = arct.load_adversarial(ARCT["arct"], arct.DEFAULT_ADVERSARIAL_DEV, data_dir)
    pairs = arct.pair_adversarial(raw)
    assert len(raw.examples) == 632 and len(pairs) == 316
    first, negated = raw.examples[pairs[0][0]], raw.examples[pairs[0][1]]
    assert negated.id == first.id + "-adversarial" and negated.label == 1 - first.label
    assert negated.candidates == first.candidates and negated.text_a != first.text_a
    assert '"' not in first.candidates[0][:1]  # CSV quoting undone
    dev_warrants = {tuple(ex.candidates) for ex in load_split(ARCT["arct"], "dev", data_dir).examples}
    assert all(tuple(raw.examples[i].candidates) in dev_warrants for i, _ in pairs)  # the originals are ARCT dev
    assert len(load_split(ARCT["arct_adv"], "train", data_dir).examples) == 2420


def test_pair_scores_hand_computed():
    # rows: o1, n1, o2, n2 with labels 0, 1, 1, 0; a cue-reader answers the same for both rows of a pair
    result = arct.pair_scores(chosen=[0, 0, 1, 0], labels=[0, 1, 1, 0], pairs=[(0, 1), (2, 3)])
    assert result["original"]["accuracy"] == 1.0 and result["negated"]["accuracy"] == 0.5
    assert result["both_right"] == {"share": 0.5, "pairs": 1, "n": 2}
    assert result["adversarial_dev"]["accuracy"] == 0.75 and result["chance"] == 0.5


@pytest.mark.data
def test_an_original_without_its_negated_row_exits_2(data_dir, run_dir, tmp_path, capsys):
    lines = (data_dir / arct.DEFAULT_ADVERSARIAL_DEV).read_text(encoding="utf-8").splitlines()
    ids = [line.split("\t")[0] for line in lines]
    keep = [lines[0]] + [lines[i] for i in range(1, len(lines)) if ids[i] in (ids[1], ids[1] + "-adversarial", ids[2])]
    (tmp_path / "adv.csv").write_text("\n".join(keep) + "\n", encoding="utf-8")
    code, err = exit_code_and_error(["arct", run_dir, "--adversarial", tmp_path / "adv.csv"], capsys)
    assert code == 2 and f"original '{ids[2]}' has no negated row '{ids[2]}-adversarial'" in err


@pytest.mark.data
def test_arct_command_on_a_run(run_dir, data_dir, capsys):
    assert diagnose_main(["arct", run_dir, "--data-dir", data_dir]) == 0
    result = json.loads((run_dir / "diagnose" / "diagnose-arct.json").read_text())
    assert result["pairs"] == 316 and result["task"] == "arct" and not result["adversarially_trained"]
    both, o, n = result["both_right"]["share"], result["original"]["accuracy"], result["negated"]["accuracy"]
    assert 0 <= both <= min(o, n) and result["adversarial_dev"]["accuracy"] == pytest.approx((o + n) / 2)
    assert (run_dir / "diagnose" / "diagnose-arct.png").is_file()


# ----------------------------------------------------------------------------------------------- partial input


def test_partial_tasks_keep_one_input():
    assert partial_input.partial_task(GLUE["snli"], "hypothesis").text == ["sentence2"]
    assert partial_input.partial_task(GLUE["snli"], "premise").text == ["sentence1"]
    warrants = partial_input.partial_task(ARCT["arct"], "warrants")
    assert warrants.text == [] and warrants.candidates == ["warrant0", "warrant1"]
    with pytest.raises(ConfigError, match="--input warrants: task 'rte' is not a ranking task"):
        partial_input.partial_task(GLUE["rte"], "warrants")
    with pytest.raises(ConfigError, match="needs one column"):
        parse_tasks({"tasks": {"t": {"type": "classification", "splits": {}, "text": [], "label": "y",
                                     "labels": ["a", "b"]}}}, "x.yaml")


def test_warrants_only_tokenizes_each_candidate_alone(tokenizer):
    task = partial_input.partial_task(ARCT["arct"], "warrants")
    split = tokenize_examples([Example("0", 1, "", candidates=["it is not", "it is"], label=0)], task, tokenizer)
    first = split.input_ids[0][0]
    assert first[:2] == [tokenizer.cls_token_id, tokenizer.sep_token_id]
    assert tokenizer.decode(first[2:-1]) == "it is not"


@pytest.mark.data
def test_partial_input_trains_through_the_trainer_beside_majority_and_full(data_dir, tiny_encoder, tmp_path, capsys):
    out = tmp_path / "partial"
    assert diagnose_main(["partial-input", "--task", "rte", "--input", "hypothesis", "--seeds", "1",
                          "--encoder", tiny_encoder, "--limit-train-examples", "16", "--max-epochs", "1",
                          "--batch-size", "16", "--accelerator", "cpu", "--data-dir", data_dir,
                          "--output-dir", out]) == 0
    result = json.loads((out / "diagnose-partial-input.json").read_text())
    with (data_dir / "glue/RTE/dev.tsv").open() as f:
        dev = [r["label"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    with (data_dir / "glue/RTE/train.tsv").open() as f:
        train_labels = [r["label"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    majority = max(set(train_labels), key=train_labels.count)
    assert result["majority"]["label"] == majority
    assert result["majority"]["dev_accuracy"] == pytest.approx(dev.count(majority) / len(dev))
    assert set(result["variants"]) == {"hypothesis-only", "full"}
    assert result["variants"]["hypothesis-only"]["text"] == ["sentence2"]
    config = yaml.safe_load((out / "hypothesis-only-seed1" / "config.yaml").read_text())
    assert config["resolved"]["tasks"]["rte"]["text"] == ["sentence2"]  # the run itself read one column
    assert 0 <= result["variants"]["full"]["dev"]["mean"] <= 1 and (out / "diagnose-partial-input.png").is_file()
    # glue.yaml's RTE has a SAN head, which needs a pair: both variants train the linear head, and say so
    full = yaml.safe_load((out / "full-seed1" / "config.yaml").read_text())["resolved"]["tasks"]["rte"]
    assert config["resolved"]["tasks"]["rte"]["head"].get("type") is None and full["head"].get("type") is None
    assert "SAN head" in result["head_note"]
    printed = capsys.readouterr().out
    assert "majority class" in printed and "Note: task 'rte' has a SAN head" in printed


# ----------------------------------------------------------------------------------------------- report


@pytest.mark.data
def test_report_has_every_applicable_section_with_relative_links(run_dir, data_dir, tmp_path, capsys):
    partial = {"task": "rte", "input": "hypothesis", "seeds": [1], "recipe": {"encoder": "tiny"},
               "majority": {"label": "entailment", "dev_accuracy": 0.527, "dev_n": 277, "train_share": 0.5},
               "variants": {"hypothesis-only": {"text": ["sentence2"], "runs": [{"seed": 1, "dev": 0.5}],
                                                "dev": {"mean": 0.5, "sd": None, "values": [0.5]}}}}
    (tmp_path / "p.json").write_text(json.dumps(partial))
    out = tmp_path / "report"
    assert diagnose_main(["report", run_dir, "--data-dir", data_dir, "--output-dir", out,
                          "--partial-input", tmp_path / "p.json"]) == 0
    text = (out / "report.md").read_text()
    for task, sections in {"rte": ["HANS", "Cue statistics", "Partial-input baselines"],
                           "arct": ["Adversarial ARCT", "Cue statistics", "Partial-input baselines"]}.items():
        for section in sections:
            assert f"### {section}: `{task}`" in text
    assert "Adversarial ARCT: `rte`" not in text and "HANS: `arct`" not in text
    assert "| lexical_overlap |" in text and "| claim-negated |" in text and "| hypothesis-only" in text
    assert "python -m mtdnn.diagnose partial-input --task arct --input warrants" in text  # none given for arct
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert {"diagnose-hans-rte.png", "diagnose-arct-arct.png", "diagnose-hans-rte.json",
            "diagnose-cues-arct.json"} <= set(links)
    for link in links:
        assert not Path(link).is_absolute() and (out / link).is_file(), link


@pytest.mark.data
def test_report_links_an_existing_hans_analysis_instead_of_writing_a_copy(run_dir, data_dir, tmp_path):
    out = tmp_path / "diag"
    assert diagnose_main(["hans", run_dir, "--task", "rte", "--data-dir", data_dir, "--output-dir", out]) == 0
    analysis = (out / "diagnose-hans.json").read_bytes()
    assert diagnose_main(["report", run_dir, "--data-dir", data_dir, "--output-dir", out]) == 0
    text = (out / "report.md").read_text()
    assert "](diagnose-hans.json)" in text and "](diagnose-hans.png)" in text
    assert not (out / "diagnose-hans-rte.json").exists() and not (out / "diagnose-hans-rte.png").exists()
    assert (out / "diagnose-hans.json").read_bytes() == analysis  # linked as it was, not rewritten
    # another label mapping is another analysis: the report scores it under its own name
    assert diagnose_main(["report", run_dir, "--data-dir", data_dir, "--output-dir", out,
                          "--label-map", "entailment=non-entailment,not_entailment=entailment"]) == 0
    assert (out / "diagnose-hans-rte.json").is_file()
