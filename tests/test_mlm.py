"""MLM auxiliary tasks: packing, the four masking strategies, SBO, the tied head, loss, metrics, training, bad input."""

import json
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from mtdnn.errors import ConfigError, run_cli
from mtdnn.tasktypes.mlm.masking import IGNORE, choose_spans, mask_sequence, rng_for, span_length_probabilities, words_of
from mtdnn.tasks.taskdef import parse_tasks

TEXTS = "a\tb\nthe quick brown fox jumps over the lazy dog\tunbelievably, tokenization splits words\n" \
        "stocks fell sharply on monday\t\nsmall\tsentences here too\n"


def mlm_task(strategy="dynamic", sbo=False, **extra):
    body = {"type": "mlm", "splits": {"train": {"path": "t.tsv"}, "dev": {"path": "t.tsv"}}, "text": ["a", "b"],
            "masking": {"strategy": strategy, "sbo": sbo}, **extra}
    return parse_tasks({"tasks": {"m": body}}, "mem.yaml")["m"]


@pytest.fixture
def text_dir(tmp_path):
    (tmp_path / "t.tsv").write_text(TEXTS)
    return tmp_path


def test_texts_are_packed_with_word_ids(text_dir, tokenizer):
    from mtdnn.tasks.tokenized import tokenized_split

    split = tokenized_split(mlm_task(max_length=24), "train", text_dir, tokenizer)
    texts = [t for line in TEXTS.splitlines()[1:] for t in line.split("\t") if t.strip()]
    pieces = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert all(n <= 24 for n in split.lengths) and len(split) >= 2
    packed = [i for ids, w in zip(split.input_ids, split.features["word_ids"]) for i, x in zip(ids, w) if x >= 0]
    assert packed == [i for p in pieces for i in p]  # every text, in order, nothing lost
    for ids, words in zip(split.input_ids, split.features["word_ids"]):
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert words[0] == -1 and words[-1] == -1 and words[1:-1] == sorted(words[1:-1])


def test_span_length_distribution_is_spanberts():
    probabilities = span_length_probabilities()
    assert len(probabilities) == 10 and sum(probabilities) == pytest.approx(1.0)
    assert sum(k * p for k, p in enumerate(probabilities, start=1)) == pytest.approx(3.797, abs=1e-3)


def long_word_ids(words=400, seed=0):
    rng = random.Random(seed)
    ids = [-1]
    for w in range(words):
        ids += [w] * rng.choice([1, 1, 1, 2, 3])
    return ids + [-1]


@pytest.mark.parametrize("strategy", ["static", "dynamic", "whole_word", "span"])
def test_masking_rate_and_whole_words(strategy):
    word_ids = long_word_ids()
    words = words_of(word_ids)
    masked_total, tokens_total = 0, 0
    for row in range(60):
        spans, span_words = choose_spans(word_ids, strategy, 0.15, rng_for(0, 1, row))
        chosen = {i for s, e in spans for i in range(s, e)}
        assert all(word_ids[i] >= 0 for i in chosen)  # special tokens are never predicted
        masked_total += len(chosen)
        tokens_total += sum(e - s for s, e in words)
        if strategy in ("whole_word", "span"):  # no word is split
            assert all(len({i for i in range(s, e)} & chosen) in (0, e - s) for s, e in words)
        if strategy == "span":
            assert all(1 <= n <= 10 for n in span_words)
    assert masked_total / tokens_total == pytest.approx(0.15, abs=0.01)


def test_span_lengths_average_about_3_8_words():
    word_ids = long_word_ids(words=2000)
    lengths = []
    for row in range(20):
        lengths += choose_spans(word_ids, "span", 0.15, rng_for(0, 0, row))[1]
    assert len(lengths) > 1000
    assert sum(lengths) / len(lengths) == pytest.approx(3.8, abs=0.2)


def masks(strategy, epoch, row=3):
    word_ids = long_word_ids(60)
    ids = list(range(1000, 1000 + len(word_ids)))
    seed_epoch = None if strategy == "static" else epoch
    return mask_sequence(ids, word_ids, strategy, 0.15, rng_for(0, seed_epoch, row), 103, 30522, {0, 101, 102, 103})


def test_dynamic_masks_change_every_epoch_static_ones_do_not():
    assert masks("dynamic", 0).labels == masks("dynamic", 0).labels  # reproducible
    assert masks("dynamic", 0).labels != masks("dynamic", 1).labels
    assert masks("static", 0).labels == masks("static", 1).labels


def test_span_replacement_is_decided_per_span():
    word_ids = long_word_ids(300)
    ids = list(range(1000, 1000 + len(word_ids)))
    kinds = []
    for row in range(40):
        m = mask_sequence(ids, word_ids, "span", 0.15, rng_for(0, 0, row), 103, 30522, {0, 101, 102, 103})
        for s, e in m.spans:
            outcome = {"mask" if m.input_ids[i] == 103 else "same" if m.input_ids[i] == ids[i] else "random"
                       for i in range(s, e)}
            assert len(outcome) == 1  # the whole span gets the same treatment
            kinds.append(outcome.pop())
            assert m.labels[s:e] == ids[s:e]
    assert kinds.count("mask") / len(kinds) == pytest.approx(0.8, abs=0.07)


def lengthen(text_dir):
    """Long enough packed sequences for several spans each."""
    (text_dir / "t.tsv").write_text(TEXTS + "".join(TEXTS.splitlines(keepends=True)[1:]) * 8)


def test_collate_masks_labels_and_span_boundaries(text_dir, tokenizer):
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split

    lengthen(text_dir)
    task = mlm_task("span", sbo=True, max_length=64)
    split = tokenized_split(task, "train", text_dir, tokenizer)
    items = [split[i] for i in range(len(split))]
    batch = collate(items, task, tokenizer.pad_token_id, tokenizer=tokenizer)
    labels, positions = batch.labels, batch.head_inputs["mlm_positions"]
    assert torch.equal(positions, labels != IGNORE) and positions.any()
    original = [torch.tensor(s) for s in split.input_ids]
    for row, ids in enumerate(original):
        assert torch.equal(labels[row, :len(ids)][positions[row, :len(ids)]], ids[positions[row, :len(ids)]])
    bounds, offsets = batch.head_inputs["span_boundaries"], batch.head_inputs["span_offsets"]
    cols = positions.nonzero()[:, 1]
    assert len(bounds) == len(cols) and ((bounds[:, 0] < cols) & (cols < bounds[:, 1])).all()
    assert torch.equal(cols - bounds[:, 0] - 1, offsets)
    again = collate(items, task, tokenizer.pad_token_id, tokenizer=tokenizer)  # dev: no epoch, fixed by seed
    assert torch.equal(again.input_ids, batch.input_ids)
    with pytest.raises(ConfigError, match="needs the tokenizer"):
        collate(items, task, tokenizer.pad_token_id)


def test_head_is_tied_to_the_input_embeddings_and_sbo_adds_a_loss(text_dir, tokenizer, tiny_encoder):
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split

    lengthen(text_dir)
    task = mlm_task("span", sbo=True, max_length=64)
    split = tokenized_split(task, "train", text_dir, tokenizer)
    batch = collate([split[i] for i in range(len(split))], task, tokenizer.pad_token_id, tokenizer=tokenizer)
    model = MultiTaskModel(load_encoder(tiny_encoder), {"m": task})
    embeddings = model.encoder.get_input_embeddings().weight
    assert not any(p.shape == embeddings.shape for p in model.heads["m"].parameters())  # no copy of E
    out = model("m", batch.input_ids, batch.attention_mask, None, batch.head_inputs)
    m = int(batch.head_inputs["mlm_positions"].sum())
    assert out.shape == (m, 2, embeddings.shape[0])
    loss = task.kind.loss(task)(out, batch.labels, batch.weight, float(len(split)))  # mlm_cross_entropy
    targets = batch.labels[batch.labels != IGNORE]
    rows = batch.head_inputs["mlm_positions"].nonzero()[:, 0]
    per_token = F.cross_entropy(out[:, 0], targets, reduction="none") + F.cross_entropy(out[:, 1], targets,
                                                                                        reduction="none")
    expected = torch.stack([per_token[rows == r].mean() if (rows == r).any() else torch.tensor(0.0)
                            for r in range(len(split))]).mean()  # a sequence with nothing masked adds 0
    assert torch.allclose(loss, expected, atol=1e-5)
    loss.backward()
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0  # the tied projection trains E


def test_masked_token_metrics():
    from mtdnn.modeling.metrics import build_metrics, compute_metrics, update_metrics

    task = mlm_task()
    metrics = build_metrics(task)
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 0.0, 0.0]])
    labels = torch.tensor([[IGNORE, 0, 1, IGNORE], [2, IGNORE, IGNORE, IGNORE]])
    update_metrics(metrics, "mlm", logits, labels, torch.ones(2))
    scores = compute_metrics(metrics)
    assert scores["masked_accuracy"] == pytest.approx(2 / 3)
    assert scores["masked_loss"] == pytest.approx(F.cross_entropy(logits, torch.tensor([0, 1, 2])).item(), rel=1e-5)


@pytest.mark.parametrize("body, message", [
    ({"text": []}, "an mlm task needs 'text': one or more text columns"),
    ({"masking": {"strategy": "span", "rate": 0}}, "field 'masking.rate': Input should be greater than 0"),
    ({"masking": {"strategy": "span", "rate": -0.1}}, "field 'masking.rate': Input should be greater than 0"),
    ({"masking": {"strategy": "whole_word", "sbo": True}}, "masking.sbo .* needs strategy: span"),
    ({"label": "y"}, "'label' is not a field of an mlm task"),
])
def test_bad_mlm_definitions_exit_2_and_write_nothing(tmp_path, capsys, body, message):
    from mtdnn.train import main

    (tmp_path / "t.tsv").write_text(TEXTS)
    spec = tmp_path / "tasks.yaml"
    task = {"type": "mlm", "splits": {"train": {"path": "t.tsv"}}, "text": ["a"], **body}
    spec.write_text(yaml.safe_dump({"tasks": {"mlm": task}}))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [str(spec), "--data-dir", str(tmp_path), "--output-dir", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {spec}: task 'mlm'") and err.count("\n") == 1
    import re
    assert re.search(message, err)
    assert not out.exists()


def test_mlm_decode_is_a_clear_error():
    from mtdnn.training.inference import decode

    with pytest.raises(ConfigError, match="is an mlm task: it has no predictions"):
        decode(mlm_task(), torch.zeros(1, 3))
    with pytest.raises(ConfigError):
        parse_tasks({"tasks": {"m": {"type": "classification", "splits": {}, "text": ["a"], "label": "y",
                                     "labels": ["n", "p"], "masking": {"strategy": "span"}}}}, "mem.yaml")


def test_training_with_an_mlm_task_leaves_it_out_of_selection(tmp_path, data_dir, tiny_encoder):
    """RTE with an MLM task over RTE's own texts: both train in the schedule; the MLM task's dev metrics are
    reported but the dev average (best-epoch selection) is RTE's accuracy alone."""
    from mtdnn.train import main

    rte = yaml.safe_load((Path(__file__).resolve().parents[1] / "task_defs" / "glue.yaml").read_text())["tasks"]["rte"]
    mlm = {"type": "mlm", "splits": {"train": {"path": "glue/RTE/train.tsv"}, "dev": {"path": "glue/RTE/dev.tsv"}},
           "text": ["sentence1", "sentence2"], "masking": {"strategy": "span", "sbo": True}, "max_length": 64}
    spec = tmp_path / "tasks.yaml"
    spec.write_text(yaml.safe_dump({"tasks": {"rte": rte, "rte_mlm": mlm}}))
    run_dir = tmp_path / "run"
    assert main([str(spec), "--data-dir", str(data_dir), "--encoder", tiny_encoder, "--limit-train-examples", "32",
                 "--batch-size", "16", "--max-epochs", "1", "--accelerator", "cpu", "--output-dir", str(run_dir)]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    epoch = metrics["epochs"][0]
    assert set(epoch["tasks"]["rte_mlm"]) == {"masked_accuracy", "masked_loss"}
    assert 0 < epoch["tasks"]["rte_mlm"]["masked_loss"] < 20
    assert epoch["average"] == pytest.approx(epoch["tasks"]["rte"]["accuracy"])
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert schedule["batches_per_task"] == {"rte": 2, "rte_mlm": 2}


def test_length_buckets_pad_token_aligned_head_inputs_and_labels(text_dir, tokenizer):
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.training.datamodule import pad_to_bucket

    lengthen(text_dir)
    task = mlm_task("span", sbo=True, max_length=40)
    split = tokenized_split(task, "train", text_dir, tokenizer)
    batch = collate([split[i] for i in range(len(split))], task, tokenizer.pad_token_id, tokenizer=tokenizer)
    before = batch.head_inputs["mlm_positions"].clone()
    padded = pad_to_bucket(batch, [64], tokenizer.pad_token_id)
    assert padded.input_ids.shape[1] == 64 and padded.labels.shape == (len(split), 64)
    positions = padded.head_inputs["mlm_positions"]
    assert positions.shape == (len(split), 64) and torch.equal(positions[:, :before.shape[1]], before)
    assert not positions[:, before.shape[1]:].any() and (padded.labels[:, before.shape[1]:] == IGNORE).all()
    assert torch.equal(positions, padded.labels != IGNORE)
