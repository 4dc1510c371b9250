"""Token-level task types in every stage: multi-task training beside a sentence-level task, evaluate (equal to the
run's metrics.json), export and reload, predict on raw text with character offsets, bad input (exit 2, nothing
written) and DDP evaluation with more ranks than dev windows."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtdnn.errors import run_cli

ROOT = Path(__file__).resolve().parents[1]
BIRDS_SEED = 0  # carve_articles(3, 1, seed=0) == [2]: the one-question article "Birds"

TAGS = "[O, B-PER, I-PER, B-LOC, I-LOC]"
SENTENCES = [("Peter Blackburn lives in Berlin .", "B-PER I-PER O O B-LOC O"),
             ("Anna went to Paris", "B-PER O O B-LOC"),
             ("Berlin is big", "B-LOC O O"),
             ("Mary Ann Smith met John", "B-PER I-PER I-PER O B-PER")]


def conll_text(rows, tag_of=lambda tag: tag) -> str:
    lines = ["-DOCSTART- O", ""]
    for words, tags in rows:
        lines += [f"{w} {tag_of(t)}" for w, t in zip(words.split(), tags.split())] + [""]
    return "\n".join(lines) + "\n"


def squad_json(contexts, bad_start=False, unanswered=False) -> dict:
    data = []
    for a, (title, context, qas) in enumerate(contexts):
        questions = []
        for q, (question, answer) in enumerate(qas):
            start = context.find(answer) + (1 if bad_start and a == 0 and q == 0 else 0)
            answers = [] if unanswered and a == 1 and q == 1 else [{"answer_start": start, "text": answer}]
            questions.append({"id": f"{title}-{q}", "question": question, "answers": answers})
        data.append({"title": title, "paragraphs": [{"context": context, "qas": questions}]})
    return {"version": "1.1", "data": data}


ARTICLES = [("Cats", "The cat sat on the mat near the door of the old house in Berlin.",
             [("Where did the cat sit?", "on the mat"), ("Which city?", "Berlin")]),
            ("Dogs", "Dogs bark at night. The dog named Rex lives in Paris with Anna.",
             [("What is the dog called?", "Rex"), ("Who lives with Rex?", "Anna")]),
            ("Birds", "Birds fly south in winter.", [("When do birds fly south?", "in winter")])]


def write_data(root: Path, bad: str | None = None) -> Path:
    (root / "ner").mkdir(parents=True, exist_ok=True)
    (root / "qa").mkdir(exist_ok=True)
    (root / "cls").mkdir(exist_ok=True)
    tag_of = (lambda t: "B-CITY" if t == "B-LOC" else t) if bad == "tag" else (lambda t: t)
    (root / "ner" / "train.txt").write_text(conll_text(SENTENCES * 3, tag_of), encoding="utf-8")
    (root / "ner" / "dev.txt").write_text(conll_text(SENTENCES), encoding="utf-8")
    articles = [(t, "  " if bad == "context" and t == "Dogs" else c, q) for t, c, q in ARTICLES]
    (root / "qa" / "squad.json").write_text(json.dumps(squad_json(articles, bad == "answer_start",
                                                                  bad == "unanswered")), encoding="utf-8")
    rows = ["sentence1\tsentence2\tlabel"] + [f"A {i} cat.\tA cat.\t{'entailment' if i % 2 else 'not_entailment'}"
                                               for i in range(12)]
    (root / "cls" / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "cls" / "dev.tsv").write_text("\n".join(rows[:7]) + "\n", encoding="utf-8")
    return root


def write_task_defs(path: Path, squad_dev_size: int = 1, squad_seed: int = 0) -> Path:
    path.write_text(f"""
tasks:
  ner:
    type: sequence_labelling
    splits:
      train: {{path: ner/train.txt, format: conll, columns: [token, tag]}}
      dev: {{path: ner/dev.txt, format: conll, columns: [token, tag]}}
    text: [token]
    label: tag
    labels: {TAGS}
    max_length: 32
  squad:
    type: span_extraction
    splits:
      train: {{path: qa/squad.json, format: squad}}
      dev: {{carve: {{from_split: train, size: {squad_dev_size}, seed: {squad_seed}, by: article}}}}
    label: answers
    max_length: 24
    qa: {{doc_stride: 6, max_answer_length: 8, n_best: 5}}
  cls:
    type: classification
    splits:
      train: {{path: cls/train.tsv}}
      dev: {{path: cls/dev.tsv}}
    text: [sentence1, sentence2]
    label: label
    labels: [entailment, not_entailment]
""", encoding="utf-8")
    return path


def cli(module, argv):
    with pytest.raises(SystemExit) as done:
        run_cli(module.main, argv)
    return done.value.code


def train_args(task_defs, data, run_dir, encoder, *extra):
    return [str(task_defs), "--data-dir", str(data), "--encoder", encoder, "--batch-size", "4", "--max-epochs", "1",
            "--accelerator", "cpu", "--output-dir", str(run_dir), "--lr", "1e-3", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_encoder):
    from mtdnn import train as trainer

    base = tmp_path_factory.mktemp("token-run")
    data, task_defs = write_data(base / "data"), write_task_defs(base / "tasks.yaml")
    run_dir = base / "run"
    assert cli(trainer, train_args(task_defs, data, run_dir, tiny_encoder)) == 0
    return base, data, task_defs, run_dir


def test_token_tasks_train_beside_a_sentence_task_and_evaluate_reproduces(trained, capsys):
    from mtdnn import evaluate

    base, data, task_defs, run_dir = trained
    metrics = json.loads((run_dir / "metrics.json").read_text())
    scores = metrics["best"]["tasks"]
    assert set(scores["ner"]) == {"entity_f1", "entity_precision", "entity_recall", "token_accuracy"}
    assert set(scores["squad"]) == {"squad_f1", "exact_match"} and set(scores["cls"]) == {"accuracy"}
    assert next(iter(scores["squad"])) == "squad_f1" and next(iter(scores["ner"])) == "entity_f1"  # selection first
    assert all(0.0 <= v <= 1.0 for t in scores.values() for v in t.values())
    steps = json.loads((run_dir / "schedule.json").read_text())["batches_per_task"]
    assert set(steps) == {"ner", "squad", "cls"}  # one task per step, all three trained
    carves = json.loads((run_dir / "carves.json").read_text())["squad"]
    assert len(carves["dev"]) == 1 and len(carves["train"]) == 2 and not set(carves["dev"]) & set(carves["train"])
    assert cli(evaluate, [str(run_dir), "--output", str(base / "eval.json")]) == 0
    again = json.loads((base / "eval.json").read_text())["tasks"]
    for task in scores:
        for name, value in scores[task].items():
            assert again[task][name] == pytest.approx(value, abs=1e-6), (task, name)


def test_export_reloads_and_predicts_raw_text_with_character_offsets(trained, capsys):
    from mtdnn import predict
    from mtdnn.training.export import load_export

    base, data, task_defs, run_dir = trained
    model, tokenizer, tasks = load_export(run_dir / "export")
    assert tasks["ner"].type == "sequence_labelling" and tasks["squad"].qa_spec.doc_stride == 6
    text = "Mr. Smith visited  Berlin, Germany."
    assert cli(predict, [str(run_dir / "export"), "--task", "ner", "--text", text]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    words = [t["word"] for t in row["tokens"]]
    assert words == ["Mr", ".", "Smith", "visited", "Berlin", ",", "Germany", "."]  # the encoder's pre-tokenizer
    assert all(text[t["start"]:t["end"]] == t["word"] for t in row["tokens"])
    assert all(text[e["start"]:e["end"]] == e["text"] for e in row["entities"])
    assert all(t["tag"] in tasks["ner"].labels for t in row["tokens"])
    context = ("The old lighthouse keeper lived alone on the rocky island for many years, counting ships "
               "and writing letters to his sister in Lisbon every week.")
    assert cli(predict, [str(run_dir / "export"), "--task", "squad", "--text", "Where did his sister live?",
                         context]) == 0
    [answer] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answer["answer"] == context[answer["start"]:answer["end"]] and answer["answer"]
    assert 1 <= len(answer["n_best"]) <= 5
    # a split of the data root: one row per question, answers cut from their contexts
    out = base / "squad-dev.jsonl"
    assert cli(predict, [str(run_dir), "--task", "squad", "--split", "dev", "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] and all(r["id"].count("-") == 1 for r in rows)


def test_predict_tags_the_words_past_max_length_as_it_tags_them_alone(trained, capsys):
    """A text longer than max_length (32 pieces here) is predicted in chunks of whole words: the last chunk's tags
    are those of its words predicted alone, and every offset indexes the original text."""
    from mtdnn import predict
    from mtdnn.evaluation.token_predict import word_chunks
    from mtdnn.tasktypes.tagging.features import pre_tokenize
    from mtdnn.training.export import load_export

    base, data, task_defs, run_dir = trained
    _, tokenizer, tasks = load_export(run_dir / "export")
    text = "Peter Blackburn lives in Berlin . " * 12 + "Anna went to Paris with Mary Ann Smith ."
    words = pre_tokenize(text, tokenizer)
    [ranges] = word_chunks([[w for w, _, _ in words]], tokenizer, tasks["ner"].max_length)
    assert len(ranges) >= 3 and ranges[-1][1] == len(words)
    tail = text[words[ranges[-1][0]][1]:]

    def tokens_and_entities(value):
        assert cli(predict, [str(run_dir / "export"), "--task", "ner", "--text", value]) == 0
        [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        return row["tokens"], row["entities"]

    tokens, found = tokens_and_entities(text)
    assert [(t["word"], t["start"], t["end"]) for t in tokens] == words
    assert all(text[t["start"]:t["end"]] == t["word"] for t in tokens)
    assert all(text[e["start"]:e["end"]] == e["text"] for e in found)
    alone, _ = tokens_and_entities(tail)
    assert [t["tag"] for t in tokens[ranges[-1][0]:]] == [t["tag"] for t in alone]


def test_token_predict_takes_tabs_in_text_and_quotes_tsv_fields(trained, tmp_path, capsys):
    """A tab inside a --text value is text; a tsv field holding a tab, a line break or a quote is quoted (csv
    excel-tab), so that each row reads back whole."""
    import csv
    import io

    from mtdnn import predict

    base, data, task_defs, run_dir = trained
    text = "Angela\tMerkel visited Paris."
    assert cli(predict, [str(run_dir), "--task", "ner", "--text", text]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["word"] for t in row["tokens"]] == ["Angela", "Merkel", "visited", "Paris", "."]
    assert all(text[t["start"]:t["end"]] == t["word"] for t in row["tokens"])
    context = 'The "old" keeper\nlived\talone on the island,\r\nwriting to his sister in Lisbon.'
    assert cli(predict, [str(run_dir), "--task", "squad", "--text", "Where did\this sister live?", context,
                         "--format", "tsv"]) == 0
    [answer] = list(csv.DictReader(io.StringIO(capsys.readouterr().out, newline=""), dialect="excel-tab"))
    assert answer["prediction"] == context[int(answer["start"]):int(answer["end"])]
    odd_id = 'q\t1\r\n"2"'
    inputs = {"ner": {"id": odd_id, "text": text}, "squad": {"id": odd_id, "question": "Where?", "context": context}}
    for task, record in inputs.items():
        (tmp_path / f"{task}.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
        out = tmp_path / f"{task}.tsv"
        assert cli(predict, [str(run_dir), "--task", task, "--input", str(tmp_path / f"{task}.jsonl"),
                             "--format", "tsv", "--output", str(out)]) == 0
        [row] = list(csv.DictReader(io.StringIO(out.read_bytes().decode("utf-8"), newline=""), dialect="excel-tab"))
        assert row["id"] == odd_id
        if task == "squad":
            assert row["prediction"] == context[int(row["start"]):int(row["end"])]


def test_bad_raw_token_input_exits_2_naming_the_input_task_and_field(trained, tmp_path, capsys):
    from mtdnn import predict

    base, data, task_defs, run_dir = trained
    out = tmp_path / "out.jsonl"
    (tmp_path / "number.jsonl").write_text('{"question": "Who?", "context": "Anna."}\n{"question": "Who?", '
                                          '"context": 5}\n', encoding="utf-8")
    (tmp_path / "bool.jsonl").write_text('{"text": true}\n', encoding="utf-8")
    cases = [
        (["--task", "squad", "--input", tmp_path / "number.jsonl"],
         f"{tmp_path / 'number.jsonl'}: line 2: task 'squad', field 'context': expected a string, found a number "
         "(value: 5)"),
        (["--task", "ner", "--input", tmp_path / "bool.jsonl"],
         f"{tmp_path / 'bool.jsonl'}: line 1: task 'ner', field 'text': expected a string, found a boolean"),
        (["--task", "ner", "--text", " \t "], "--text: task 'ner', field 'text': empty text"),
        (["--task", "squad", "--text", "Who?", "\t"], "--text: task 'squad', field 'context': empty context"),
        (["--task", "squad", "--text", "Who?"], "--text: task 'squad' takes 2 text(s) (question, context), got 1"),
    ]
    for args, needle in cases:
        assert cli(predict, [str(run_dir), *map(str, args), "--output", str(out)]) == 2
        [message] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert needle in message, message
        assert "--text" not in needle or "line" not in message
        assert not out.exists() and not list(tmp_path.glob("out.jsonl*"))


@pytest.mark.parametrize("bad, needle", [
    ("tag", "ner/train.txt: line 7: task 'ner', field 'tag': tag 'B-CITY' is not in the task's tag set"),
    ("answer_start", "question id 'Cats-0': field 'answers[0].answer_start'"),
    ("context", "field 'context': empty context"),
    # one question without answers in a labelled split (it once made the whole split unlabelled: a KeyError)
    ("unanswered", "qa/squad.json: task 'squad', split 'train', question id 'Dogs-1': field 'answers': no answer"),
    # a tag column that is not among the split's columns (it once read every tag as missing: a KeyError)
    ("label-column", "ner/train.txt: task 'ner', split 'train', field 'label': column 'tag' is not in the split's "
                     "columns (token, ner)"),
])
def test_bad_token_data_exits_2_naming_the_line_or_id_and_writes_nothing(tmp_path, tiny_encoder, capsys, bad,
                                                                         needle):
    from mtdnn import train as trainer

    data, task_defs = write_data(tmp_path / "data", bad), write_task_defs(tmp_path / "tasks.yaml")
    if bad == "label-column":
        task_defs.write_text(task_defs.read_text().replace("columns: [token, tag]", "columns: [token, ner]"))
    run_dir = tmp_path / "run"
    assert cli(trainer, train_args(task_defs, data, run_dir, tiny_encoder)) == 2
    [message] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert needle in message
    assert not run_dir.exists()


def test_bad_token_task_definitions_are_config_errors(tmp_path):
    from mtdnn.errors import ConfigError
    from mtdnn.tasks.taskdef import parse_tasks

    base = {"type": "sequence_labelling", "splits": {"train": {"path": "x", "format": "conll", "columns": ["t", "g"]}},
            "text": ["t"], "label": "g", "labels": ["O", "B-PER", "I-PER"]}
    parse_tasks({"tasks": {"ner": base}}, "mem")
    for change, needle in (({"labels": ["O", "B-PER"]}, "'I-PER' is missing"),
                           ({"splits": {"train": {"path": "x", "format": "tsv"}}}, "'conll' format"),
                           ({"splits": {"train": {"path": "x", "format": "conll"}}}, "needs 'columns'")):
        with pytest.raises(ConfigError, match=needle):
            parse_tasks({"tasks": {"ner": {**base, **change}}}, "mem")
    squad = {"type": "span_extraction", "splits": {"train": {"path": "x", "format": "squad"}}, "max_length": 32,
             "label": "answers", "qa": {"doc_stride": 30}}
    with pytest.raises(ConfigError, match="doc_stride 30 must be below"):
        parse_tasks({"tasks": {"squad": squad}}, "mem")
    with pytest.raises(ConfigError, match="'text' is not a field of a span_extraction task"):
        parse_tasks({"tasks": {"squad": {**squad, "qa": {"doc_stride": 8}, "text": ["question", "context"]}}}, "mem")


def test_a_max_length_override_too_short_for_the_stride_names_the_flag(tmp_path, tiny_encoder, capsys):
    from mtdnn import train as trainer

    data, task_defs = write_data(tmp_path / "data"), write_task_defs(tmp_path / "tasks.yaml")
    run_dir = tmp_path / "run"
    assert cli(trainer, train_args(task_defs, data, run_dir, tiny_encoder, "--tasks", "squad",
                                   "--max-length", "12")) == 2
    assert ("--max-length: max length 12 is too short for task 'squad': its field 'qa.doc_stride' 6 must be below "
            "max length - 8 = 4") in capsys.readouterr().err
    assert not run_dir.exists()


def test_ddp_evaluation_gathers_windows_with_more_ranks_than_dev_windows(tmp_path, tiny_encoder):
    """2 gloo processes; the dev split (one short article, one question) has a single window: the run finishes
    (a rank without dev windows once hung the metric sync) and scores as one process does."""
    from mtdnn import train as trainer

    data = write_data(tmp_path / "data")
    task_defs = tmp_path / "tasks.yaml"
    write_task_defs(task_defs, squad_dev_size=1, squad_seed=BIRDS_SEED)
    common = ("--tasks", "squad", "--dropout", "0")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    ddp = subprocess.run([sys.executable, "-m", "mtdnn.train",
                          *train_args(task_defs, data, tmp_path / "ddp", tiny_encoder, *common, "--devices", "2",
                                      "--strategy", "ddp")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert cli(trainer, train_args(task_defs, data, tmp_path / "single", tiny_encoder, *common, "--devices", "1")) == 0
    carves = json.loads((tmp_path / "single" / "carves.json").read_text())["squad"]
    assert carves["dev"] == ["Birds"]  # one question, one window: rank 1 scores nothing
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text())["epochs"] for d in ("ddp", "single"))
    assert a[0]["tasks"]["squad"] == pytest.approx(b[0]["tasks"]["squad"], abs=1e-9)
