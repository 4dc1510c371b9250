"""Distillation of token-level tasks (issue 18, part 3): per-piece soft targets of sequence labelling (per-token tag
distributions over the labelled pieces) and extractive QA (start and end distributions per window, keyed by window
id), the per-piece KD losses against a hand computation, the student's tokenizer check, and a tiny teachers + student
run of NER, QA and a sentence task on slices of the real CoNLL-2003, SQuAD and RTE files."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mtdnn.tasks.batch import Batch
import yaml

from mtdnn.distillation import soft_targets
from mtdnn.distillation.batch_targets import PieceBatchTargets
from mtdnn.distillation.pieces import MASKED, PieceOutputs, pieces_digest
from mtdnn.errors import run_cli
from mtdnn.tasks.types import TASK_TYPES
from mtdnn.modeling.token_heads import span_distillation_loss, token_distillation_loss
from mtdnn.tasks.rows import IGNORE

TASK_DEFS = """
tasks:
  conll2003:
    type: sequence_labelling
    splits:
      train: {path: conll2003/train.txt, format: conll, columns: [token, pos, chunk, ner]}
      dev: {path: conll2003/valid.txt, format: conll, columns: [token, pos, chunk, ner]}
    text: [token]
    label: ner
    labels: [O, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, B-MISC, I-MISC]
    max_length: 48
  squad:
    type: span_extraction
    splits:
      train: {path: squad/slice.json, format: squad}
      dev: {carve: {from_split: train, size: 1, seed: 0, by: article}}
    label: answers
    max_length: 80
    qa: {doc_stride: 24, max_answer_length: 20, n_best: 5}
  rte:
    type: classification
    splits:
      train: {path: glue/RTE/train.tsv}
      dev: {path: glue/RTE/dev.tsv}
    text: [sentence1, sentence2]
    label: label
    labels: [entailment, not_entailment]
"""


# ------------------------------------------------------------------------------------------------ the losses


def _log_softmax(values, temperature=1.0):
    scaled = [v / temperature for v in values]
    top = max(scaled)
    norm = top + math.log(sum(math.exp(v - top) for v in scaled))
    return [v - norm for v in scaled]


def test_token_distillation_loss_equals_a_hand_computation_and_ignores_unlabelled_pieces():
    # one sentence of 3 pieces, 2 tags; piece 0 (a special token) carries no label; 2 members; T = 2, alpha = 0.25
    s = [[5.0, -5.0], [1.0, 0.0], [0.0, 2.0]]
    z = [[[-9.0, 9.0], [2.0, 0.0], [0.0, 0.0]], [[9.0, -9.0], [0.0, 1.0], [1.0, 3.0]]]
    labels = [IGNORE, 0, 1]
    T, alpha = 2.0, 0.25
    total = 0.0
    for piece in (1, 2):  # the labelled pieces only
        q = [sum(math.exp(lp) for lp in (_log_softmax(z[m][piece], T)[c] for m in range(2))) / 2 for c in range(2)]
        soft = -sum(qc * lc for qc, lc in zip(q, _log_softmax(s[piece], T)))
        gold = -_log_softmax(s[piece])[labels[piece]]
        total += alpha * T * T * soft + (1 - alpha) * gold
    expected = total / 2  # the mean over the sentence's labelled pieces
    args = (torch.tensor([s]), torch.tensor([z]), torch.tensor([labels]), torch.ones(1), 1.0, T, alpha)
    assert token_distillation_loss(*args).item() == pytest.approx(expected, rel=1e-6)
    # the student's task loss is the type's, whichever gold loss the task names
    for gold in ("token_cross_entropy", "token_cross_entropy_per_piece"):
        named = SimpleNamespace(loss_name=gold)
        assert TASK_TYPES["sequence_labelling"].distillation_loss(named)(*args).item() == pytest.approx(expected, rel=1e-6)
    # the teacher's and the student's values at the unlabelled piece change nothing
    s2, z2 = torch.tensor([s]), torch.tensor([z])
    s2[0, 0], z2[0, :, 0] = torch.tensor([-30.0, 30.0]), torch.tensor([0.0, 50.0])
    assert token_distillation_loss(s2, z2, *args[2:]).item() == pytest.approx(expected, rel=1e-6)
    # a weight-0 row (DDP padding) adds nothing; the normaliser divides
    two = token_distillation_loss(torch.tensor([s, s]), torch.tensor([z, z]), torch.tensor([labels, labels]),
                                  torch.tensor([1.0, 0.0]), 2.0, T, alpha)
    assert two.item() == pytest.approx(expected / 2, rel=1e-6)


def test_span_distillation_loss_averages_the_start_and_end_soft_cross_entropies():
    # one window of 3 real pieces and 1 padding position; 2 members; T = 3, alpha = 0.6; gold start 1, end 2
    M = -1e4
    s = [[0.5, -1.0], [2.0, 0.0], [-1.0, 1.5], [M, M]]
    z = [[[0.0, 0.0], [3.0, -1.0], [1.0, 2.0], [M, M]], [[1.0, -2.0], [0.0, 0.0], [-1.0, 4.0], [M, M]]]
    T, alpha, gold_positions = 3.0, 0.6, (1, 2)
    sides = []
    for side in (0, 1):
        student = [row[side] for row in s[:3]]  # padding has probability 0 for both
        q = [sum(math.exp(_log_softmax([row[side] for row in z[m][:3]], T)[i]) for m in range(2)) / 2
             for i in range(3)]
        soft = -sum(qi * li for qi, li in zip(q, _log_softmax(student, T)))
        gold = -_log_softmax(student)[gold_positions[side]]
        sides.append(alpha * T * T * soft + (1 - alpha) * gold)
    expected = (sides[0] + sides[1]) / 2
    labels = torch.tensor([[1, 2, 7]])  # a batch's labels: start, end, the window's row (ignored)
    named = SimpleNamespace(loss_name="span_cross_entropy")
    loss = TASK_TYPES["span_extraction"].distillation_loss(named)(torch.tensor([s]), torch.tensor([z]), labels,
                                                                   torch.ones(1), 1.0, T, alpha,
                                                                   student_tempered=torch.tensor([s]) / T)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert span_distillation_loss(torch.tensor([s]), torch.tensor([z]), labels[:, :2], torch.ones(1), 1.0, T,
                                  alpha).item() == pytest.approx(expected, rel=1e-5)


# ------------------------------------------------------------------------------------ per-piece batch targets


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_per_piece_targets_are_placed_at_each_rows_real_pieces(padding_side):
    rows = [torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2), -torch.ones(2, 1, 2)]  # (members, pieces, 2)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    if padding_side == "left":
        mask = mask.flip(1)
    batch = Batch(task="t", input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=mask.flip(0),
                  idx=torch.tensor([1, 0]), weight=torch.ones(2))
    placed = PieceBatchTargets(rows).for_batch(batch)
    assert placed.shape == (2, 2, 4, 2)
    real = batch.attention_mask.bool()
    assert torch.equal(placed[0][:, real[0]], rows[1]) and torch.equal(placed[1][:, real[1]], rows[0])
    assert (placed[0][:, ~real[0]] == MASKED).all() and (placed[1][:, ~real[1]] == -1e4).all()
    with pytest.raises(RuntimeError, match="row 0 of task 't' has 3 pieces, its cached teacher outputs 1"):
        PieceBatchTargets([rows[1], rows[1]]).for_batch(batch)


# ----------------------------------------------------------------------------------------- end to end, tiny


def slice_conll(src: Path, dst: Path, sentences: int) -> None:
    blocks = src.read_text(encoding="utf-8").split("\n\n")[: sentences + 1]  # -DOCSTART- is the first block
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def slice_squad(src: Path, dst: Path, articles: int = 3, questions: int = 2) -> None:
    data = json.loads(src.read_text(encoding="utf-8"))
    kept = []
    for article in data["data"][:articles]:
        paragraph = dict(article["paragraphs"][0])
        paragraph["qas"] = paragraph["qas"][:questions]
        kept.append({"title": article["title"], "paragraphs": [paragraph]})
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps({"version": data["version"], "data": kept}), encoding="utf-8")


def slice_rows(src: Path, dst: Path, rows: int) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[: rows + 1]), encoding="utf-8")


def write_yaml(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


def exit_code(main, argv, capsys):
    with pytest.raises(SystemExit) as done:
        run_cli(main, argv)
    return done.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def world(tmp_path_factory, data_dir, tiny_encoder):
    """Data slices, a multi-task run of NER + QA + RTE, then teachers and a student, each by its command's main."""
    from mtdnn import distill, teachers
    from mtdnn.cli import train as trainer

    base = tmp_path_factory.mktemp("token-kd")
    data = base / "data"
    slice_conll(data_dir / "conll2003" / "train.txt", data / "conll2003" / "train.txt", 24)
    slice_conll(data_dir / "conll2003" / "valid.txt", data / "conll2003" / "valid.txt", 12)
    slice_squad(data_dir / "squad" / "dev-v1.1-articles-00-37.json", data / "squad" / "slice.json")
    slice_rows(data_dir / "glue" / "RTE" / "train.tsv", data / "glue" / "RTE" / "train.tsv", 16)
    slice_rows(data_dir / "glue" / "RTE" / "dev.tsv", data / "glue" / "RTE" / "dev.tsv", 8)
    task_defs = base / "tasks.yaml"
    task_defs.write_text(TASK_DEFS, encoding="utf-8")
    mt_run = base / "mt"
    common = ["--data-dir", str(data), "--accelerator", "cpu"]
    assert trainer.main([str(task_defs), "--encoder", tiny_encoder, "--batch-size", "8", "--max-epochs", "1",
                         "--lr", "1e-3", "--output-dir", str(mt_run), *common]) == 0
    teacher_spec = write_yaml(base / "teachers.yaml", {
        "task_defs": str(task_defs), "from_run": str(mt_run), "output_dir": str(base / "teachers"),
        "tasks": ["conll2003", "squad"], "members": 2, "vary": {"seed": [1, 2]},
        "finetune": {"max_epochs": 1, "batch_size": 8, "lr": "1e-3"}})
    assert teachers.main([teacher_spec, *common]) == 0
    student_spec = write_yaml(base / "student.yaml", {
        "task_defs": str(task_defs), "teachers": str(base / "teachers"), "output_dir": str(base / "student"),
        "distill": ["conll2003", "squad"], "gold": ["rte"], "temperature": 2.0, "alpha": 0.5,
        "train": {"max_epochs": 1, "batch_size": 8, "lr": 1.0e-3}})
    assert distill.main([student_spec, *common]) == 0
    return {"base": base, "data": data, "task_defs": task_defs, "teachers": base / "teachers", "common": common,
            "student_spec": student_spec, "teacher_spec": teacher_spec, "student": base / "student"}


def _member(world, task, k=1):
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.training.export import load_export

    model, tokenizer, tasks = load_export(world["teachers"] / task / f"member-{k}" / "export")
    return model, tokenizer, tasks[task], tokenized_split(tasks[task], "train", world["data"], tokenizer)


def _alone(model, task, split, tokenizer, row):
    from mtdnn.tasks.collate import collate

    batch = collate([split[row]], task, tokenizer.pad_token_id)
    with torch.no_grad():
        return model(task.name, batch.input_ids, batch.attention_mask, batch.token_type_ids)[0].numpy()


def test_tagging_soft_targets_are_each_sentences_piece_logits_with_the_label_mask(world):
    ids, outputs, fingerprint = soft_targets.read_outputs(world["teachers"] / "conll2003" / "logits" / "member-1-train")
    model, tokenizer, task, split = _member(world, "conll2003")
    assert isinstance(outputs, PieceOutputs) and fingerprint["shape"] == "piece"
    assert fingerprint["width"] == 9 and fingerprint["pieces"] == pieces_digest(split)
    assert sorted(ids) == sorted(split.ids) and len(ids) == len(split) > 10
    for row in (0, 7, len(split) - 1):  # one sentence at a time: no padding, no batch order
        cached = outputs.rows[ids.index(split.ids[row])]
        assert cached.dtype == np.float32 and cached.shape == (split.lengths[row], 9)
        assert np.allclose(cached, _alone(model, task, split, tokenizer, row), atol=1e-5)
        mask = outputs.masks[ids.index(split.ids[row])]
        assert mask == [int(label != IGNORE) for label in split.features["piece_labels"][row]]
    assert any(sum(m) < len(m) - 2 for m in outputs.masks)  # some word has several pieces


def test_qa_soft_targets_are_start_and_end_logits_per_window_keyed_by_question_and_window(world):
    ids, outputs, _ = soft_targets.read_outputs(world["teachers"] / "squad" / "logits" / "member-2-train")
    model, tokenizer, task, split = _member(world, "squad", 2)
    assert sorted(ids) == sorted(split.ids)
    windows = {}
    for window_id in ids:
        question, k = window_id.rsplit("#", 1)
        windows.setdefault(question, []).append(int(k))
    assert all(sorted(ks) == list(range(len(ks))) for ks in windows.values())
    assert max(len(ks) for ks in windows.values()) >= 3  # long contexts: several windows per question
    for row in (0, len(split) - 1):
        cached = outputs.rows[ids.index(split.ids[row])]
        assert cached.shape == (split.lengths[row], 2) and outputs.masks[ids.index(split.ids[row])] == [1] * len(cached)
        assert np.allclose(cached, _alone(model, task, split, tokenizer, row), atol=1e-5)


def test_teacher_report_scores_the_ensemble_with_each_tasks_own_metrics(world):
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.modeling.entity_metrics import entity_counts, scores_from_counts

    report = json.loads((world["teachers"] / "teachers.json").read_text())
    assert set(report["tasks"]) == {"conll2003", "squad"}
    ner, squad = report["tasks"]["conll2003"], report["tasks"]["squad"]
    assert ner["metric"] == "entity_f1" and squad["metric"] == "squad_f1"
    # the ensemble's token accuracy and entity F1, recomputed from the cached dev logits: mean of the members'
    # softmax, argmax at each word's first piece
    _, tokenizer, task, _ = _member(world, "conll2003")
    dev = tokenized_split(task, "dev", world["data"], tokenizer)
    q = 0
    for k in (1, 2):
        ids, outputs, _ = soft_targets.read_outputs(world["teachers"] / "conll2003" / "logits" / f"member-{k}-dev")
        q = q + np.concatenate([torch.softmax(torch.from_numpy(outputs.rows[ids.index(i)]), -1).numpy()
                                for i in dev.ids]) / 2
    pieces = np.concatenate([np.asarray(p) for p in dev.features["piece_labels"]])
    labelled = pieces != IGNORE
    assert ner["ensemble"]["dev"]["token_accuracy"] == pytest.approx(
        float((q.argmax(-1)[labelled] == pieces[labelled]).mean()))
    starts = np.cumsum([0] + dev.lengths)
    names = task.labels
    gold = [[names[t] for t in p if t != IGNORE] for p in dev.features["piece_labels"]]
    predicted = [[names[t] for t, g in zip(q[a:b].argmax(-1), p) if g != IGNORE]
                 for a, b, p in zip(starts[:-1], starts[1:], dev.features["piece_labels"])]
    assert ner["ensemble"]["dev"]["entity_f1"] == pytest.approx(scores_from_counts(*entity_counts(gold, predicted))["f1"])
    # what the soft targets carry: one unit per labelled piece (NER), per window start and end (QA)
    assert ner["soft_targets"]["dev"]["examples"] == int(labelled.sum())
    assert ner["soft_targets"]["dev"]["agreement_with_gold"] == pytest.approx(
        ner["ensemble"]["dev"]["token_accuracy"], abs=1e-6)
    _, qa_tokenizer, qa_task, _ = _member(world, "squad")
    assert squad["soft_targets"]["dev"]["examples"] == 2 * len(tokenized_split(qa_task, "dev", world["data"], qa_tokenizer))
    assert 0 <= squad["ensemble"]["dev"]["exact_match"] <= squad["ensemble"]["dev"]["squad_f1"] <= 1
    assert [p["members"] for p in squad["disagreement"]["pairs"]] == [[1, 2]]
    assert "| conll2003 | entity_f1 |" in (world["teachers"] / "teachers.md").read_text()


def test_student_batches_carry_per_piece_soft_targets_of_their_rows(world):
    from mtdnn.distillation.student import DistillationDataModule
    from mtdnn.tasks.taskdef import load_task_defs

    _, tokenizer, _, _ = _member(world, "conll2003")
    tasks = load_task_defs(str(world["task_defs"]))
    targets = {}
    for name in ("conll2003", "squad"):
        split = _member(world, name)[3]
        targets[name] = (split.ids, soft_targets.teacher_outputs(world["teachers"], tasks[name], "train",
                                                                 world["data"], split.ids, rows=split))
    dm = DistillationDataModule(tasks, world["data"], tokenizer, targets, batch_size=8)
    dm.setup("fit")
    seen = set()
    for batch in dm.train_dataloader():
        if batch.task == "rte":
            assert batch.teacher_logits is None
            continue
        seen.add(batch.task)
        z, real = batch.teacher_logits, batch.attention_mask.bool()
        width = 9 if batch.task == "conll2003" else 2
        assert z.shape == (*batch.input_ids.shape[:1], 2, batch.input_ids.shape[1], width)
        ids, rows = targets[batch.task]
        for r, i in enumerate(batch.idx.tolist()):
            assert torch.equal(z[r][:, real[r]], torch.from_numpy(rows[i]))
            assert (z[r][:, ~real[r]] == MASKED).all()
    assert seen == {"conll2003", "squad"}


def test_student_report_and_export(world):
    from mtdnn.training.runs import read_metrics

    report = json.loads((world["student"] / "report.json").read_text())
    best = read_metrics(world["student"])["best"]
    for task, metric in (("conll2003", "entity_f1"), ("squad", "squad_f1")):
        assert report["tasks"][task]["student"]["score"] == best["tasks"][task][metric]
    assert report["gold_tasks"]["rte"]["student"]["score"] == best["tasks"]["rte"]["accuracy"]
    assert (world["student"] / "export" / "heads.safetensors").is_file()


def test_a_student_with_another_tokenizer_is_refused_naming_both(world, tmp_path, capsys):
    from encoder_families import build_encoder

    from mtdnn import distill

    other = build_encoder("bert", tmp_path / "other-bert", num_layers=2)  # its own small WordPiece vocabulary
    doc = yaml.safe_load(Path(world["student_spec"]).read_text())
    doc.update(output_dir=str(tmp_path / "refused"), init={"encoder": str(other)})
    spec = write_yaml(tmp_path / "other.yaml", doc)
    code, err = exit_code(distill.main, [spec, *world["common"]], capsys)
    assert code == 2, err
    assert f"{spec}: field 'init.encoder' (task 'conll2003')" in err and str(other) in err
    assert str(world["teachers"] / "conll2003" / "member-1" / "export" / "encoder") in err
    assert err.count("fingerprint") == 2 and "per word piece" in err
    assert not (tmp_path / "refused").exists()
    # with the teacher spec too, before any teacher is built or trained
    doc["teachers"] = None
    spec = write_yaml(tmp_path / "other2.yaml", doc)
    teacher_doc = yaml.safe_load(Path(world["teacher_spec"]).read_text())
    teacher_doc["output_dir"] = str(tmp_path / "new-teachers")
    teacher_spec = write_yaml(tmp_path / "teachers.yaml", teacher_doc)
    code, err = exit_code(distill.main, [teacher_spec, spec, *world["common"]], capsys)
    assert code == 2 and str(other) in err and str(world["base"] / "mt" / "export" / "encoder") in err, err
    assert not (tmp_path / "new-teachers").exists() and not (tmp_path / "refused").exists()


def test_the_paired_comparison_refuses_token_level_tasks_before_training(world, tmp_path, capsys):
    from mtdnn import distill

    doc = yaml.safe_load(Path(world["student_spec"]).read_text())
    doc.update(output_dir=str(tmp_path / "paired"))
    spec = write_yaml(tmp_path / "paired.yaml", doc)
    code, err = exit_code(distill.main, [world["teacher_spec"], spec, "--seeds", "2", *world["common"]], capsys)
    assert code == 2 and f"{spec}: field 'distill'" in err and "conll2003 (entity_f1), squad (squad_f1)" in err, err
    assert not (tmp_path / "paired").exists() and not (tmp_path / "paired-paired").exists()


def test_a_student_with_other_pieces_is_refused(world, tmp_path, capsys):
    from mtdnn import distill

    doc = yaml.safe_load(Path(world["student_spec"]).read_text())
    doc.update(output_dir=str(tmp_path / "refused"))
    doc["train"]["max_length"] = 32
    spec = write_yaml(tmp_path / "short.yaml", doc)
    code, err = exit_code(distill.main, [spec, *world["common"]], capsys)
    assert code == 2 and "field 'train.max_length'" in err and "(max_length 32)" in err and "max_length 48" in err, err
    assert not (tmp_path / "refused").exists()
    # with the teacher spec too, before any teacher is built
    teacher_doc = yaml.safe_load(Path(world["teacher_spec"]).read_text())
    teacher_doc["output_dir"] = str(tmp_path / "new-teachers")
    teacher_spec = write_yaml(tmp_path / "teachers.yaml", teacher_doc)
    code, err = exit_code(distill.main, [teacher_spec, spec, *world["common"]], capsys)
    assert code == 2 and "max_length 32 by the student and 48 by the teachers" in err, err
    assert not (tmp_path / "new-teachers").exists() and not (tmp_path / "refused").exists()
