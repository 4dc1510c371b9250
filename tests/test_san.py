"""The SAN answer module: its equations, stochastic prediction dropout, temperature, data and bad input."""

import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from mtdnn.errors import ConfigError, run_cli
from mtdnn.modeling.losses import distillation_cross_entropy
from mtdnn.modeling.san import SanHead, average_steps, step_keep_mask
from mtdnn.tasks.taskdef import parse_tasks

PAIR = {"type": "classification", "splits": {"train": {"path": "t.tsv"}}, "text": ["p", "h"], "label": "l",
        "labels": ["a", "b", "c"]}


def san_task(**head):
    return parse_tasks({"tasks": {"t": {**PAIR, "head": {"type": "san", **head}}}}, "mem.yaml")["t"]


def inputs(batch=4, seq=9, d=16):
    torch.manual_seed(0)
    hidden = torch.randn(batch, seq, d)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, 7:] = 0
    # [CLS] premise(3) [SEP] hypothesis(3) [SEP] (+ padding in row 0)
    seq_ids = torch.tensor([-1, 0, 0, 0, -1, 1, 1, 1, -1]).repeat(batch, 1)
    seq_ids[0, 6:] = -1
    return hidden, mask, seq_ids


def test_eval_output_is_the_log_of_the_mean_step_probabilities():
    head = SanHead(san_task(steps=3), hidden_size=16).eval()
    hidden, mask, seq_ids = inputs()
    z = head.step_logits(hidden, mask, seq_ids)
    assert z.shape == (4, 3, 3)
    log_p = head(hidden, mask, None, sequence_ids=seq_ids)
    assert log_p.shape == (4, 3)
    assert torch.allclose(log_p.exp(), z.softmax(-1).mean(1), atol=1e-6)
    assert torch.allclose(log_p.exp().sum(-1), torch.ones(4), atol=1e-6)
    # cross-entropy on the output is MT-DNN's negative log-likelihood -log mean_k P^k_y
    labels = torch.tensor([0, 2, 1, 1])
    nll = -z.softmax(-1).mean(1)[torch.arange(4), labels].log().mean()
    assert torch.allclose(F.cross_entropy(log_p, labels), nll, atol=1e-6)


def test_premise_and_hypothesis_memories_come_from_sequence_ids():
    head = SanHead(san_task(steps=2), hidden_size=16).eval()
    hidden, mask, seq_ids = inputs()
    base = head(hidden, mask, None, sequence_ids=seq_ids)
    changed = hidden.clone()
    changed[:, 0] += 5.0   # [CLS] is neither premise nor hypothesis: no effect
    assert torch.allclose(head(changed, mask, None, sequence_ids=seq_ids), base)
    changed = hidden.clone()
    changed[:, 2] += 5.0   # a premise token
    assert not torch.allclose(head(changed, mask, None, sequence_ids=seq_ids), base)
    with pytest.raises(ValueError, match="sequence_ids"):
        head(hidden, mask, None)


def test_stochastic_prediction_dropout_keeps_at_least_one_step():
    torch.manual_seed(1)
    keep = step_keep_mask(2000, 5, 0.99, torch.device("cpu"))
    assert keep.any(dim=1).all() and (keep.sum(1) == 1).float().mean() > 0.9
    keep = step_keep_mask(4000, 5, 0.1, torch.device("cpu"))
    assert abs(keep.float().mean().item() - 0.9) < 0.02
    z = torch.randn(3, 4, 2)
    keep = torch.tensor([[True, False, False, True], [False, False, True, False], [True] * 4])
    expected = torch.stack([z[i][keep[i]].softmax(-1).mean(0) for i in range(3)]).log()
    assert torch.allclose(average_steps(z, keep), expected, atol=1e-6)


def test_training_drops_steps_and_eval_averages_all():
    head = SanHead(san_task(steps=5, step_dropout=0.5, dropout=0.0), hidden_size=16)
    hidden, mask, seq_ids = inputs()
    head.train()
    torch.manual_seed(3)
    a = head(hidden, mask, None, sequence_ids=seq_ids)
    torch.manual_seed(4)
    b = head(hidden, mask, None, sequence_ids=seq_ids)
    assert not torch.allclose(a, b)  # different steps dropped
    head.eval()
    assert torch.allclose(head(hidden, mask, None, sequence_ids=seq_ids),
                          head(hidden, mask, None, sequence_ids=seq_ids))


def test_temperature_divides_each_steps_logits_before_averaging():
    head = SanHead(san_task(steps=4), hidden_size=16).eval()
    torch.nn.init.normal_(head.W_3.weight, std=1.0)  # steps that disagree, so that where T applies matters
    hidden, mask, seq_ids = inputs()
    z = head.step_logits(hidden, mask, seq_ids)
    t = 3.0
    log_p, tempered = head(hidden, mask, None, sequence_ids=seq_ids, temperature=t)
    assert torch.allclose(log_p, head(hidden, mask, None, sequence_ids=seq_ids))
    assert torch.allclose(tempered.exp(), (z / t).softmax(-1).mean(1), atol=1e-6)
    assert not torch.allclose(tempered, (log_p / t).log_softmax(-1), atol=1e-4)  # not T after averaging
    # the distillation loss uses it for the soft term and log P for the gold term
    teacher = torch.randn(4, 2, 3)
    labels, weight = torch.tensor([0, 1, 2, 0]), torch.ones(4)
    q = (teacher / t).softmax(-1).mean(1)
    soft = -(q * (z / t).softmax(-1).mean(1).log()).sum(-1)
    gold = -log_p[torch.arange(4), labels]
    expected = (0.3 * t * t * soft + 0.7 * gold).mean()
    loss = distillation_cross_entropy(log_p, teacher, labels, weight, 4.0, t, 0.3, student_tempered=tempered)
    assert torch.allclose(loss, expected, atol=1e-5)


def test_linear_head_distillation_is_unchanged_by_the_tempered_path():
    torch.manual_seed(0)
    logits, teacher = torch.randn(5, 3), torch.randn(5, 2, 3)
    labels, weight = torch.tensor([0, 1, 2, 0, 1]), torch.ones(5)
    a = distillation_cross_entropy(logits, teacher, labels, weight, 5.0, 2.0, 0.5)
    b = distillation_cross_entropy(logits, teacher, labels, weight, 5.0, 2.0, 0.5, student_tempered=logits / 2.0)
    assert torch.allclose(a, b)


def test_sequence_ids_are_tokenized_and_cached_without_token_type_ids(tmp_path, tokenizer):
    import copy

    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split

    (tmp_path / "t.tsv").write_text("p\th\tl\nthe cat sat\ta cat\ta\nbirds fly south\tthey do\tb\n")
    no_types = copy.deepcopy(tokenizer)
    no_types.model_input_names = ["input_ids", "attention_mask"]  # as RoBERTa's tokenizer
    task = san_task()
    split = tokenized_split(task, "train", tmp_path, no_types)
    assert split.token_type_ids is None
    ids = split.features["sequence_ids"][0]
    n_premise = len(tokenizer.tokenize("the cat sat"))
    assert ids == [-1] + [0] * n_premise + [-1] + [1] * len(tokenizer.tokenize("a cat")) + [-1]
    again = tokenized_split(task, "train", tmp_path, no_types)  # from the cache
    assert again.features["sequence_ids"] == split.features["sequence_ids"]
    batch = collate([split[0], split[1]], task, tokenizer.pad_token_id)
    assert batch.head_inputs["sequence_ids"].shape == batch.input_ids.shape
    assert (batch.head_inputs["sequence_ids"][batch.attention_mask == 0] == -1).all()


def test_san_model_trains_a_step(tmp_path, tiny_encoder, tokenizer):
    from mtdnn.modeling.losses import cross_entropy
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split

    (tmp_path / "t.tsv").write_text("p\th\tl\nthe cat sat\ta cat\ta\nbirds fly south\tthey do\tb\n")
    task = san_task(steps=3)
    split = tokenized_split(task, "train", tmp_path, tokenizer)
    batch = collate([split[0], split[1]], task, tokenizer.pad_token_id)
    model = MultiTaskModel(load_encoder(tiny_encoder), {"t": task})
    out = model("t", batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs)
    loss = cross_entropy(out, batch.labels, batch.weight, 2.0)
    loss.backward()
    assert math.isfinite(loss.item()) and model.heads["t"].gru.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("head, message", [
    ({"type": "san"}, "head type 'san' needs a text pair"),
    ({"steps": 3}, "steps: only for head type 'san'"),
])
def test_bad_san_definitions(head, message):
    body = {**PAIR, "text": ["p"], "head": head} if "type" in head else {**PAIR, "head": head}
    with pytest.raises(ConfigError, match=message):
        parse_tasks({"tasks": {"t": body}}, "mem.yaml")


def test_san_on_a_single_sentence_task_exits_2_and_writes_nothing(tmp_path, capsys):
    from mtdnn.train import main

    spec = tmp_path / "tasks.yaml"
    body = {**PAIR, "text": ["sentence"], "head": {"type": "san", "steps": 5, "step_dropout": 0.1}}
    spec.write_text(yaml.safe_dump({"tasks": {"sst": body}}))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [str(spec), "--data-dir", str(tmp_path), "--output-dir", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "task 'sst'" in err and "head type 'san' needs a text pair" in err and err.count("\n") == 1
    assert not out.exists()


def test_length_buckets_pad_sequence_ids(tmp_path, tokenizer):
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.training.datamodule import pad_to_bucket

    (tmp_path / "t.tsv").write_text("p\th\tl\nthe cat sat\ta cat\ta\n")
    task = san_task()
    split = tokenized_split(task, "train", tmp_path, tokenizer)
    padded = pad_to_bucket(collate([split[0]], task, tokenizer.pad_token_id), [32], tokenizer.pad_token_id)
    ids = padded.head_inputs["sequence_ids"]
    assert ids.shape == padded.input_ids.shape == (1, 32)
    assert ids[0, :len(split.input_ids[0])].tolist() == split.features["sequence_ids"][0]
    assert (ids[0, len(split.input_ids[0]):] == -1).all()
