"""Per-task Hugging Face models in an export (``export/hf/<task>/``): served by ``transformers.pipeline`` as is,
with the toolkit's own probabilities and scores; heads it cannot express are named toolkit-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mtdnn.tasks.taskdef import parse_tasks

PAIRS = [("A man is playing a guitar on the stage.", "Someone plays music."),
         ("The cat sleeps.", "A dog is barking loudly at the mailman outside the house."),
         ("Two children are running in a park.", "Kids run.")]
LONG_PAIR = (" ".join(["the committee approved the annual budget after a long debate"] * 4),
             " ".join(["members voted in favour of the proposal"] * 3))


def _task(type_: str, pooling: str = "pooler", **extra) -> dict:
    body = {"type": type_, "splits": {"test": {"path": "unused.tsv"}}, "head": {"pooling": pooling},
            "max_length": 24, **extra}
    if type_ == "ranking":
        return {**body, "text": ["question"], "candidates": ["answer1", "answer2"], "label": "label"}
    return {**body, "text": ["premise", "hypothesis"], "label": "label"}


TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TASKS = parse_tasks({"tasks": {
    "nli": _task("classification", labels=["entailment", "neutral", "contradiction"]),
    "sts": _task("regression"),
    "qa": _task("ranking"),
    "first_token": _task("classification", "cls", labels=["no", "yes"]),
    "mean_pooled": _task("classification", "mean", labels=["no", "yes"]),
    "san_nli": {**_task("classification", labels=["yes", "no"]), "head": {"type": "san", "steps": 2}},
    "ner": {"type": "sequence_labelling", "max_length": 32, "text": ["token"], "label": "tag", "labels": TAGS,
            "splits": {"test": {"path": "unused.conll", "format": "conll", "columns": ["token", "tag"]}}},
    "squad": {"type": "span_extraction", "max_length": 48, "label": "answers",
              "qa": {"doc_stride": 16, "max_answer_length": 6, "n_best": 5},
              "splits": {"test": {"path": "unused.json", "format": "squad"}}},
}}, "test")
SENTENCES = ["John Smith flew from Paris to New York on Monday morning",
             "the weather in London was grey and wet all week",
             "Maria and her brother visited Berlin Rome and Madrid last summer",
             "nobody expected the committee to approve the plan so quickly"]
QUESTIONS = [("where did the meeting take place", "Last year the annual meeting took place in a small hall in Geneva "
              "near the lake."),
             ("who wrote the report", "According to the minutes, two engineers from the city council wrote it."),
             ("when did the shop open", "Our little shop opened in March and closed again in late autumn.")]


def _spread_weights(model, seed: int = 0) -> None:
    """Heads and pooler with std-1 weights, so that probabilities are far from uniform (a wrong mapping shows)."""
    torch.manual_seed(seed)
    for head in model.heads.values():
        if hasattr(head, "out"):  # the SAN head is toolkit-only whatever its weights
            torch.nn.init.normal_(head.out.weight, std=1.0)
            torch.nn.init.normal_(head.out.bias, std=1.0)
    pooler = getattr(model.encoder, "pooler", None)
    for weight in (pooler.parameters() if pooler is not None else []):
        if weight.dim() == 2:
            torch.nn.init.normal_(weight, std=0.5)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, tiny_encoder):
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.training.export import export_model

    model = MultiTaskModel(load_encoder(tiny_encoder), TASKS)
    _spread_weights(model)
    return export_model(model, load_tokenizer(tiny_encoder), TASKS, tmp_path_factory.mktemp("hf") / "export",
                        source_encoder=tiny_encoder)


def toolkit_predictions(export: Path, task: str, pairs, tmp_path: Path) -> list[dict]:
    """``python -m mtdnn.predict EXPORT --task T --input pairs.jsonl --format jsonl`` (in process)."""
    from mtdnn import predict

    columns = TASKS[task].text
    source, output = tmp_path / f"{task}.jsonl", tmp_path / f"{task}-out.jsonl"
    source.write_text("".join(json.dumps(dict(zip(columns, p))) + "\n" for p in pairs))
    assert predict.main([str(export), "--task", task, "--input", str(source), "--format", "jsonl",
                         "--output", str(output)]) == 0
    return [json.loads(line) for line in output.read_text().splitlines()]


def served(folder: Path, pairs, **kwargs) -> list[dict[str, float]]:
    """``pipeline("text-classification")`` on ``{"text", "text_pair"}`` inputs: ``{label: score}`` per pair."""
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(folder), device="cpu")
    results = classify([{"text": a, "text_pair": b} for a, b in pairs], top_k=None, **kwargs)
    return [{r["label"]: r["score"] for r in rows} for rows in results]


def test_manifest_names_each_task_as_served_or_toolkit_only(export_dir):
    meta = json.loads((export_dir / "mtdnn_export.json").read_text())
    assert meta["huggingface"] == {"nli": "hf/nli", "sts": "hf/sts", "ner": "hf/ner", "squad": "hf/squad"}
    assert sorted(meta["toolkit_only"]) == ["first_token", "mean_pooled", "qa", "san_nli"]
    assert "ranking head" in meta["toolkit_only"]["qa"]
    assert "pooling 'cls'" in meta["toolkit_only"]["first_token"]
    assert "pooling 'mean'" in meta["toolkit_only"]["mean_pooled"]
    assert meta["toolkit_only"]["san_nli"].startswith("head type 'san'")
    assert sorted(p.name for p in (export_dir / "hf").iterdir()) == ["ner", "nli", "squad", "sts"]
    assert meta["serving"]["nli"] == {"auto_class": "AutoModelForSequenceClassification",
                                      "pipeline": "text-classification",
                                      "arguments": {"top_k": None, "truncation": True}}
    assert meta["serving"]["ner"]["arguments"] == {"aggregation_strategy": "first"}
    assert meta["serving"]["squad"]["arguments"] == {"max_seq_len": 48, "doc_stride": 16, "max_answer_len": 6,
                                                     "align_to_words": False}
    ner = json.loads((export_dir / "hf" / "ner" / "config.json").read_text())
    assert ner["architectures"] == ["BertForTokenClassification"] and ner["id2label"] == dict(
        (str(i), t) for i, t in enumerate(TAGS))
    squad = json.loads((export_dir / "hf" / "squad" / "config.json").read_text())
    assert squad["architectures"] == ["BertForQuestionAnswering"]
    for name in ("ner", "squad"):
        assert json.loads((export_dir / "hf" / name / "tokenizer_config.json").read_text())["model_max_length"] == \
            TASKS[name].max_length
    nli = json.loads((export_dir / "hf" / "nli" / "config.json").read_text())
    assert nli["architectures"] == ["BertForSequenceClassification"]
    assert nli["problem_type"] == "single_label_classification"
    assert nli["id2label"] == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    assert nli["label2id"] == {"entailment": 0, "neutral": 1, "contradiction": 2}
    sts = json.loads((export_dir / "hf" / "sts" / "config.json").read_text())
    assert (sts["problem_type"], sts["id2label"]) == ("regression", {"0": "score"})


def test_pipeline_probabilities_equal_mtdnn_predict_on_pairs(export_dir, tmp_path):
    expected = toolkit_predictions(export_dir, "nli", PAIRS + [LONG_PAIR], tmp_path)
    got = served(export_dir / "hf" / "nli", PAIRS)
    for row, probabilities in zip(expected, got):
        assert set(probabilities) == set(row["probabilities"])
        assert max(row["probabilities"].values()) > 0.5  # not near uniform: a wrong weight would show
        for label, p in row["probabilities"].items():
            assert probabilities[label] == pytest.approx(p, abs=1e-5)
    # The tokenizer's model_max_length is the task's max_length: truncation=True truncates as the toolkit does.
    long = served(export_dir / "hf" / "nli", [LONG_PAIR], truncation=True)[0]
    for label, p in expected[-1]["probabilities"].items():
        assert long[label] == pytest.approx(p, abs=1e-5)


def test_pipeline_gives_the_raw_regression_score(export_dir, tmp_path):
    expected = [row["prediction"] for row in toolkit_predictions(export_dir, "sts", PAIRS, tmp_path)]
    # problem_type "regression": the pipeline applies no function (no sigmoid) by default.
    default = [scores["score"] for scores in served(export_dir / "hf" / "sts", PAIRS)]
    raw = [scores["score"] for scores in served(export_dir / "hf" / "sts", PAIRS, function_to_apply="none")]
    assert default == raw
    assert any(not 0 < s < 1 for s in expected)  # outside a sigmoid's range
    assert default == pytest.approx(expected, abs=1e-5)


def toolkit_raw_predictions(export: Path, task: str, records: list[dict], tmp_path: Path) -> list[dict]:
    """``python -m mtdnn.predict EXPORT --task T --input raw.jsonl --format jsonl`` (in process)."""
    from mtdnn import predict

    source, output = tmp_path / f"{task}.jsonl", tmp_path / f"{task}-out.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert predict.main([str(export), "--task", task, "--input", str(source), "--format", "jsonl",
                         "--output", str(output)]) == 0
    return [json.loads(line) for line in output.read_text().splitlines()]


def test_token_classification_pipeline_gives_mtdnn_predicts_entities(export_dir, tmp_path):
    from transformers import pipeline

    meta = json.loads((export_dir / "mtdnn_export.json").read_text())
    serving = meta["serving"]["ner"]
    assert (serving["auto_class"], serving["pipeline"]) == ("AutoModelForTokenClassification", "token-classification")
    expected = toolkit_raw_predictions(export_dir, "ner", [{"text": t} for t in SENTENCES], tmp_path)
    tagger = pipeline(serving["pipeline"], model=str(export_dir / meta["huggingface"]["ner"]), device="cpu",
                      **serving["arguments"])
    got = tagger(SENTENCES)
    found = multi_word = 0
    for row, entities in zip(expected, got):
        ours = [(e["type"], e["start"], e["end"], e["text"]) for e in row["entities"]]
        theirs = [(e["entity_group"], e["start"], e["end"], e["word"]) for e in entities]
        assert [t[:3] for t in theirs] == [o[:3] for o in ours], row["id"]
        found += len(ours)
        multi_word += sum(" " in o[3] for o in ours)
    assert found >= 4  # random std-1 tag weights tag many words: the comparison is not between two empty lists
    assert multi_word >= 1  # and B-/I- tags of several words are grouped into one entity by both


def _best_span(start: torch.Tensor, end: torch.Tensor, context: torch.Tensor, max_answer_len: int):
    """The best valid span ``(i, j)`` of one window by ``start[i] + end[j]`` (BERT's rule), over context pieces,
    ``0 <= j - i < max_answer_len``: written out here, independently of the toolkit's decoder."""
    best, span = float("-inf"), None
    for i in torch.nonzero(context).flatten().tolist():
        for j in range(i, min(i + max_answer_len, len(context))):
            if context[j] and start[i] + end[j] > best:
                best, span = float(start[i] + end[j]), (i, j)
    return span


def test_question_answering_folder_gives_mtdnn_predicts_answers(export_dir, tmp_path):
    """The AutoModelForQuestionAnswering folder's logits on the task's window give predict's answer (by the
    pipeline where the installed transformers has one; version 5 removed it, so by its auto class as well)."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline

    meta = json.loads((export_dir / "mtdnn_export.json").read_text())
    serving = meta["serving"]["squad"]
    folder = export_dir / meta["huggingface"]["squad"]
    args = serving["arguments"]
    expected = toolkit_raw_predictions(export_dir, "squad", [{"question": q, "context": c} for q, c in QUESTIONS],
                                       tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForQuestionAnswering.from_pretrained(str(folder)).eval()
    answers = set()
    for row, (question, context) in zip(expected, QUESTIONS):
        enc = tokenizer(question, context, truncation="only_second", max_length=args["max_seq_len"],
                        return_offsets_mapping=True, return_tensors="pt")
        assert enc["input_ids"].shape[1] < args["max_seq_len"]  # one window: the rule below is the whole decoder
        offsets = enc.pop("offset_mapping")[0]
        context_mask = torch.tensor([s == 1 for s in enc.sequence_ids(0)])
        with torch.no_grad():
            out = model(**enc)
        i, j = _best_span(out.start_logits[0], out.end_logits[0], context_mask, args["max_answer_len"])
        start, end = int(offsets[i][0]), int(offsets[j][1])
        assert (context[start:end], start, end) == (row["answer"], row["start"], row["end"])
        answers.add(row["answer"])
    assert len(answers) == len(QUESTIONS)  # three different answers: the weights are not trivially aligned
    if serving["pipeline"] is not None:  # transformers 4
        answer = pipeline(serving["pipeline"], model=str(folder), device="cpu")
        for row, (question, context) in zip(expected, QUESTIONS):
            served = answer(question=question, context=context, **args)
            assert (served["answer"], served["start"], served["end"]) == (row["answer"], row["start"], row["end"])
    else:
        assert "no 'question-answering' pipeline" in serving["note"]


def _tiny(model_type: str, **extra):
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=1000, **extra)
    return AutoModel.from_config(config)


def test_another_family_maps_its_own_head_roberta():
    """RoBERTa's sequence-classification head holds the pooler's dense layer: pooler + linear maps onto it."""
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.training.hf_export import convert_task

    tasks = {"nli": TASKS["nli"]}
    model = MultiTaskModel(_tiny("roberta"), tasks)
    _spread_weights(model)
    conversion = convert_task(model, tasks["nli"])
    hf = conversion.model
    assert type(hf).__name__ == "RobertaForSequenceClassification", conversion.reason
    assert torch.equal(hf.classifier.dense.weight, model.encoder.pooler.dense.weight)
    assert torch.equal(hf.classifier.out_proj.weight, model.heads["nli"].out.weight)
    input_ids = torch.randint(5, 1000, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(input_ids)
    model.eval()
    with torch.no_grad():
        ours = model("nli", input_ids, mask).softmax(-1)
        theirs = hf(input_ids=input_ids, attention_mask=mask).logits.softmax(-1)
    assert ours.max() > 0.5
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_type", ["roberta", "electra"])
@pytest.mark.parametrize("task, family", [("ner", "ForTokenClassification"), ("squad", "ForQuestionAnswering")])
def test_token_level_heads_map_onto_other_families(model_type, task, family):
    """Token-level models drop the pooler, which a token-level head never reads: the head's linear layer alone
    maps onto ``classifier`` / ``qa_outputs``, and the probe agrees on real pieces."""
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.training.hf_export import convert_task

    tasks = {task: TASKS[task]}
    model = MultiTaskModel(_tiny(model_type), tasks)
    _spread_weights(model)
    conversion = convert_task(model, tasks[task])
    assert conversion.model is not None, conversion.reason
    assert type(conversion.model).__name__.endswith(family)
    ours = model.heads[task].out.weight
    theirs = getattr(conversion.model, "classifier" if task == "ner" else "qa_outputs").weight
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("model_type, extra, reason", [
    ("big_bird", {"attention_type": "original_full"}, "head has other parameters"),  # dense + out_proj on [CLS]
    ("longformer", {"attention_window": 4}, "computes other outputs"),  # global attention on [CLS]: same shapes
])
def test_a_family_whose_head_differs_is_toolkit_only(model_type, extra, reason):
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.training.hf_export import convert_task

    tasks = {"nli": TASKS["nli"]}
    model = MultiTaskModel(_tiny(model_type, **extra), tasks)
    _spread_weights(model)
    conversion = convert_task(model, tasks["nli"])
    assert conversion.model is None and reason in conversion.reason, conversion.reason


def test_a_changed_computation_with_the_same_parameters_is_not_approximated(tiny_encoder):
    """Equal names and shapes are not enough: a pooler with another activation fails the probe."""
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.training.hf_export import convert_task

    tasks = {"nli": TASKS["nli"]}
    model = MultiTaskModel(load_encoder(tiny_encoder), tasks)
    _spread_weights(model)
    assert convert_task(model, tasks["nli"]).model is not None
    model.encoder.pooler.activation = torch.nn.GELU()
    conversion = convert_task(model, tasks["nli"])
    assert conversion.model is None and "computes other outputs" in conversion.reason



def test_each_type_without_a_hugging_face_form_says_why_in_its_own_words():
    from mtdnn.tasks.types import TASK_TYPES
    from mtdnn.training.hf_export import convert_task

    reasons = {name: kind.no_hf_model for name, kind in TASK_TYPES.items() if kind.hf_model is None}
    assert set(reasons) == {"ranking", "mlm"}
    assert len(set(reasons.values())) == 2 and "candidate" in reasons["ranking"] and "masked" in reasons["mlm"]

    class Named:  # convert_task reads the type's reason before anything else of the task
        name, type, kind = "aux", "mlm", TASK_TYPES["mlm"]

    assert convert_task(None, Named()).reason == f"mlm head: {reasons['mlm']}"


def test_the_api_predicts_token_level_tasks_as_the_command_does(export_dir, tmp_path):
    """Issue 27 part 3: ``mtdnn.load(...).predict`` for sequence labelling (texts) and span extraction
    ((question, context) tuples or mappings) gives the rows ``mtdnn.predict --format jsonl`` writes."""
    import mtdnn
    from mtdnn.errors import DataError

    model = mtdnn.load(export_dir)
    expected = toolkit_raw_predictions(export_dir, "ner", [{"text": t} for t in SENTENCES], tmp_path)
    assert model.predict(SENTENCES, task="ner") == expected
    assert model.predict(SENTENCES[0], task="ner") == expected[:1]
    expected = toolkit_raw_predictions(export_dir, "squad", [{"question": q, "context": c} for q, c in QUESTIONS],
                                       tmp_path)
    assert model.predict(QUESTIONS, task="squad") == expected
    assert model.predict([{"question": q, "context": c} for q, c in QUESTIONS], task="squad") == expected
    with pytest.raises(DataError, match=r"input 0: task 'squad': takes 2 text\(s\) \(question, context\)"):
        model.predict(["a question without a context"], task="squad")
    with pytest.raises(DataError, match="field 'text': empty text"):
        model.predict(["   "], task="ner")
