"""Distillation (MT-DNN-KD): the KD loss and its gradient, ensemble averaging, the teacher build (cache reuse,
invalidation, resume), the student end to end on real data slices with a tiny encoder, and bad input."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from mtdnn.distillation import soft_targets

from mtdnn import teachers as teachers_cmd
from mtdnn.distillation import teacher_report, teachers
from mtdnn.errors import CheckpointError, ConfigError, run_cli
from mtdnn.modeling.losses import (distillation_cross_entropy, distillation_mse, ensemble_prediction, ensemble_probabilities,
                          soft_cross_entropy)

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")
SLICES = {"glue/RTE/train.tsv": 96, "glue/RTE/dev.tsv": 48, "glue/STS-B/train.tsv": 96, "glue/STS-B/dev.tsv": 48}


# ------------------------------------------------------------------------------------------------ the loss


def test_soft_loss_equals_cross_entropy_for_one_hot_targets_at_t1():
    torch.manual_seed(0)
    s, y = torch.randn(6, 3), torch.tensor([0, 2, 1, 1, 0, 2])
    q = F.one_hot(y, 3).float()
    assert torch.allclose(soft_cross_entropy(s, q, 1.0), F.cross_entropy(s, y, reduction="none"), atol=1e-6)
    # teacher logits whose softmax is exactly one-hot: the whole KD loss is CE(s, y) for any alpha
    teacher = torch.full((6, 2, 3), float("-inf")).scatter(2, y.view(6, 1, 1).expand(6, 2, 1), 0.0)
    for alpha in (0.0, 0.3, 1.0):
        loss = distillation_cross_entropy(s, teacher, y, torch.ones(6), 6.0, temperature=1.0, alpha=alpha)
        assert loss.item() == pytest.approx(F.cross_entropy(s, y).item(), abs=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_gradient_is_alpha_t_times_softmax_minus_q(temperature, alpha):
    # Per example, before normalisation: with weight 1 and normalizer 1 the loss is the sum of the examples' losses,
    # so row i of d loss / d s is the gradient of example i's loss l_i with respect to its own logits s_i. Its soft
    # part is alpha * T * (softmax(s_i / T) - q_i); the gold part (1 - alpha) * (softmax(s_i) - onehot(y_i)).
    torch.manual_seed(1)
    s = torch.randn(5, 4, requires_grad=True)
    z, y = torch.randn(5, 3, 4) * 3, torch.tensor([0, 3, 1, 2, 1])
    loss = distillation_cross_entropy(s, z, y, torch.ones(5), 1.0, temperature=temperature, alpha=alpha)
    (grad,) = torch.autograd.grad(loss, s)
    q = F.softmax(z / temperature, dim=-1).mean(1)
    soft = alpha * temperature * (F.softmax(s.detach() / temperature, -1) - q)
    gold = (1 - alpha) * (F.softmax(s.detach(), -1) - F.one_hot(y, 4).float())
    assert torch.allclose(grad - gold, soft, atol=1e-6)
    # the DDP convention: sum_i w_i l_i / normalizer, so example i's row is scaled by w_i / normalizer
    weight = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0])
    (scaled,) = torch.autograd.grad(distillation_cross_entropy(s, z, y, weight, 4.0, temperature, alpha), s)
    assert torch.allclose(scaled, grad * weight[:, None] / 4.0, atol=1e-6)


def test_ensemble_averages_probabilities_not_logits():
    z = torch.tensor([[[0.0, 0.0], [float(np.log(3.0)), 0.0]]])  # one example, two members
    assert torch.allclose(ensemble_probabilities(z), torch.tensor([[0.625, 0.375]]))  # (0.5 + 0.75) / 2
    averaged_logits = F.softmax(z.mean(1), -1)
    assert not torch.allclose(ensemble_probabilities(z), averaged_logits, atol=1e-3)
    t2 = ensemble_probabilities(z, temperature=2.0)
    expected = (F.softmax(z[0, 0] / 2, -1) + F.softmax(z[0, 1] / 2, -1)) / 2
    assert torch.allclose(t2[0], expected) and torch.allclose(t2.sum(-1), torch.ones(1))
    # regression: the members' mean prediction; the KD loss mixes it with the gold target by alpha
    preds = torch.tensor([[[1.0], [3.0]], [[0.0], [4.0]]])
    assert torch.equal(ensemble_prediction(preds), torch.tensor([2.0, 2.0]))
    s, gold = torch.tensor([2.5, 1.0]), torch.tensor([3.0, 1.0])
    loss = distillation_mse(s, preds, gold, torch.ones(2), 2.0, alpha=0.25)
    assert loss.item() == pytest.approx((0.25 * (0.25 + 1.0) + 0.75 * (0.25 + 0.0)) / 2)
    # ensemble decisions and disagreement, as the teacher report computes them
    outputs = torch.tensor([[[2.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 2.0]], [[1.0, 0.0], [3.0, 0.0]]])
    assert teacher_report.ensemble_outputs("classification", outputs).argmax(-1).tolist() == [0, 1, 0]
    pairs = teacher_report.pairwise_disagreement("classification", outputs)
    assert pairs == [{"members": [1, 2], "value": pytest.approx(1 / 3)}]


def test_align_by_id_never_misaligns():
    ids = ["a", "b", "c", "d"]
    outputs = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert soft_targets.align(ids, outputs, ["c", "a"], "x").tolist() == [[4, 5], [0, 1]]
    with pytest.raises(CheckpointError, match="1 example id.*not in the cached"):
        soft_targets.align(ids, outputs, ["a", "z"], "x")
    with pytest.raises(CheckpointError, match="duplicate"):
        soft_targets.align(["a", "a", "c", "d"], outputs, ["a"], "x")


def test_student_batches_carry_the_soft_targets_of_their_rows(data_dir, tokenizer):
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.distillation.student import DistillationDataModule
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    tasks = select_tasks(load_task_defs(GLUE), ["rte", "stsb"], GLUE)
    ids = tokenized_split(tasks["rte"], "train", data_dir, tokenizer).ids
    shuffled = list(reversed(ids))  # cached in another order than the split's
    outputs = np.array([[[float(i), -float(i)]] for i in shuffled], dtype=np.float32)  # (n, 1 member, 2)
    dm = DistillationDataModule(tasks, data_dir, tokenizer, {"rte": (shuffled, outputs)}, batch_size=8,
                                limit_train_examples=40)
    dm.setup("fit")
    seen = 0
    for batch in dm.train_dataloader():
        if batch.task == "rte":
            expected = [float(ids[i]) for i in batch.idx.tolist()]
            assert batch.teacher_logits.shape == (len(expected), 1, 2)
            assert batch.teacher_logits[:, 0, 0].tolist() == expected
            seen += len(expected)
        else:
            assert batch.teacher_logits is None
    assert seen == 40


def test_distillation_module_uses_soft_targets_on_distill_tasks_only(tiny_encoder):
    from mtdnn.distillation.student import DistillationModule
    from mtdnn.tasks.batch import Batch
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    tasks = select_tasks(load_task_defs(GLUE), ["rte", "stsb"], GLUE)
    module = DistillationModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()}, distill_tasks=["rte"],
                                temperature=2.0, alpha=0.25)
    torch.manual_seed(0)
    s, z, y, w = torch.randn(4, 2), torch.randn(4, 3, 2), torch.tensor([0, 1, 1, 0]), torch.tensor([1.0, 1, 1, 0])
    def batch(task, weight, labels, teacher_logits=None):
        ids = torch.zeros(len(weight), 1, dtype=torch.long)
        return Batch(task=task, input_ids=ids, attention_mask=ids, idx=torch.arange(len(weight)), weight=weight,
                     labels=labels, teacher_logits=teacher_logits)

    loss = module.task_loss(batch("rte", w, y, z), s)
    assert loss.item() == pytest.approx(distillation_cross_entropy(s, z, y, w, 3.0, 2.0, 0.25).item(), abs=1e-6)
    assert loss.item() != pytest.approx(F.cross_entropy(s[:3], y[:3]).item(), abs=1e-3)
    scores, gold = torch.randn(4), torch.rand(4) * 5  # a gold task: its own loss, no teachers
    assert module.task_loss(batch("stsb", torch.ones(4), gold), scores).item() == \
        pytest.approx(F.mse_loss(scores, gold).item(), abs=1e-6)
    with pytest.raises(RuntimeError, match="no teacher_logits"):
        module.task_loss(batch("rte", w, y), s)
    assert dict(module.hparams)["distill_tasks"] == ["rte"] and module.hparams.temperature == 2.0


def test_layer_selection_keeps_the_chosen_layers(tiny_encoder):
    from mtdnn.distillation.student import select_layers
    from mtdnn.modeling.model import load_encoder

    source = load_encoder(tiny_encoder)
    student = select_layers(load_encoder(tiny_encoder), [1], "spec")
    assert student.config.num_hidden_layers == 1 and len(student.encoder.layer) == 1
    assert torch.equal(student.encoder.layer[0].output.dense.weight, source.encoder.layer[1].output.dense.weight)
    with pytest.raises(ConfigError, match="increasing indices in 0..1"):
        select_layers(load_encoder(tiny_encoder), [1, 0], "spec")


# ------------------------------------------------------------------------------------- teachers and student


def slice_data(src: Path, dst: Path, drop_last: str | None = None) -> Path:
    """Copy the first rows of the real RTE and STS-B files (after their header) into a new data root."""
    for rel, rows in SLICES.items():
        lines = (src / rel).read_text(encoding="utf-8").splitlines(keepends=True)[: rows + 1]
        if rel == drop_last:
            lines = lines[:-1]
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text("".join(lines), encoding="utf-8")
    return dst


def write_yaml(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


class Spy:
    """Records calls to a function (optionally changing the environment for one of them)."""

    def __init__(self, fn, key, fault_on=None, monkeypatch=None):
        self.fn, self.key, self.fault_on, self.monkeypatch, self.calls = fn, key, fault_on, monkeypatch, []

    def __call__(self, *args, **kwargs):
        key = self.key(*args, **kwargs)
        self.calls.append(key)
        if key == self.fault_on:
            self.monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "2")  # interrupt this member's training
            try:
                return self.fn(*args, **kwargs)
            finally:
                self.monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
        return self.fn(*args, **kwargs)


def member_of(config, **kwargs):
    return (config.tasks[0], Path(config.output_dir).name)


def outputs_of(export_dir, task_name, split, *args, **kwargs):
    return (Path(export_dir).parent.parent.name, Path(export_dir).parent.name, split)


@pytest.fixture(scope="module")
def world(tmp_path_factory, data_dir, tiny_encoder):
    """A multi-task run on data slices, then a teacher build that is interrupted, resumed and rerun."""
    from mtdnn.train import main as train_main
    from mtdnn.training import trainer as train

    base = tmp_path_factory.mktemp("kd")
    data = slice_data(data_dir, base / "data")
    mt_run = base / "mt"
    assert train_main([GLUE, "--tasks", "rte,stsb", "--data-dir", str(data), "--encoder", tiny_encoder, "--batch-size",
                       "16", "--max-epochs", "1", "--accelerator", "cpu", "--output-dir", str(mt_run)]) == 0
    spec = write_yaml(base / "teachers.yaml", {
        "task_defs": GLUE, "from_run": str(mt_run), "output_dir": str(base / "teachers"), "tasks": ["rte", "stsb"],
        "members": 2, "vary": {"seed": [1, 2], "dropout": [0.1, 0.2]},
        "finetune": {"max_epochs": 1, "batch_size": 16, "lr": "1e-3"}})
    args = [spec, "--data-dir", str(data), "--accelerator", "cpu"]
    real_train, real_outputs = train.fit, soft_targets.member_outputs
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        for attempt in ("interrupted", "resumed", "rerun"):
            trained = Spy(real_train, member_of,
                          fault_on=("stsb", "member-2") if attempt == "interrupted" else None, monkeypatch=mp)
            computed = Spy(real_outputs, outputs_of)
            mp.setattr(train, "fit", trained)
            mp.setattr(soft_targets, "member_outputs", computed)
            stamps = {p: p.stat().st_mtime_ns for p in (base / "teachers").rglob("*.json")}
            code = teachers_cmd.main(args)
            complete = sorted(f"{p.parent.parent.name}/{p.parent.name}"
                              for p in (base / "teachers").glob("*/*/metrics.json"))
            runs[attempt] = {"code": code, "trained": trained.calls, "computed": computed.calls, "stamps": stamps,
                             "complete": complete}
    return {"base": base, "data": data, "mt_run": mt_run, "teacher_spec": spec, "teachers": base / "teachers",
            "runs": runs, "tiny": tiny_encoder}


def test_interrupted_teacher_build_resumes_without_redoing_finished_members(world):
    interrupted, resumed = world["runs"]["interrupted"], world["runs"]["resumed"]
    assert interrupted["code"] in (130, 143)  # the member's training was interrupted (Ctrl-C or SIGTERM)
    assert interrupted["complete"] == ["rte/member-1", "rte/member-2", "stsb/member-1"]
    assert interrupted["trained"] == [("rte", "member-1"), ("rte", "member-2"),
                                      ("stsb", "member-1"), ("stsb", "member-2")]
    assert resumed["code"] == 0
    assert resumed["trained"] == [("stsb", "member-2")]  # the finished members are not trained again
    assert resumed["computed"] == [("stsb", "member-2", "train"), ("stsb", "member-2", "dev")]  # nor re-run
    assert resumed["complete"] == ["rte/member-1", "rte/member-2", "stsb/member-1", "stsb/member-2"]
    # a complete member keeps its export and cached outputs, not its checkpoints (most of its disk)
    assert not list(world["teachers"].glob("*/member-*/checkpoints"))
    assert len(list(world["teachers"].glob("*/member-*/export/heads.safetensors"))) == 4
    # each member is a normal training run from the multi-task run, with its own seed and dropout
    config = yaml.safe_load((world["teachers"] / "stsb" / "member-2" / "config.yaml").read_text())
    assert config["tasks"] == ["stsb"] and config["seed"] == 2 and config["dropout"] == 0.2
    assert Path(config["init_from"]) == world["mt_run"].resolve()


def test_rerun_reuses_every_member_and_cached_output(world):
    rerun = world["runs"]["rerun"]
    assert rerun["code"] == 0 and rerun["trained"] == [] and rerun["computed"] == []
    for path, stamp in rerun["stamps"].items():
        if path.name == "fingerprint.json" or path.name == "metrics.json":
            assert path.stat().st_mtime_ns == stamp, path


def test_cached_outputs_are_the_members_logits_by_example_id(world):
    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.training.export import load_export

    export = world["teachers"] / "rte" / "member-1" / "export"
    # members serve the student: no Hugging Face folders by default (a full encoder copy each, issue 26)
    assert not (export / "hf").exists()
    assert json.loads((export / "mtdnn_export.json").read_text())["toolkit_only"]["rte"].startswith("export_hf is off")
    ids, outputs, fingerprint = soft_targets.read_outputs(world["teachers"] / "rte" / "logits" / "member-1-train")
    assert outputs.dtype == np.float32 and outputs.shape == (SLICES["glue/RTE/train.tsv"], 2)
    assert {"data", "tokenizer", "member_export", "count"} <= set(fingerprint)
    model, tokenizer, tasks = load_export(export)
    split = tokenized_split(tasks["rte"], "train", world["data"], tokenizer)
    assert sorted(ids) == sorted(split.ids)
    for row in (0, 17, 95):  # one example at a time: no padding, no batch order
        batch = collate([split[row]], tasks["rte"], tokenizer.pad_token_id)
        with torch.no_grad():
            logits = model("rte", batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs)
        assert np.allclose(outputs[ids.index(split.ids[row])], logits[0].numpy(), atol=1e-5)
    _, stsb, _ = soft_targets.read_outputs(world["teachers"] / "stsb" / "logits" / "member-2-dev")
    assert stsb.shape == (SLICES["glue/STS-B/dev.tsv"], 1)


def test_teacher_report_members_ensemble_and_disagreement(world):
    from mtdnn.tasks.data import load_split
    from mtdnn.training.runs import read_metrics

    report = json.loads((world["teachers"] / "teachers.json").read_text())
    rte = report["tasks"]["rte"]
    scores = [read_metrics(world["teachers"] / "rte" / f"member-{k}")["best"]["tasks"]["rte"]["accuracy"]
              for k in (1, 2)]
    assert [m["run_score"] for m in rte["members"]] == scores  # each member's run scored all of dev too
    assert [m["seed"] for m in rte["members"]] == [1, 2] and [m["dropout"] for m in rte["members"]] == [0.1, 0.2]
    # members and ensemble, recomputed by hand from the cached dev logits: every score on the same rows
    dev = load_split(teachers.load_task_defs(GLUE)["rte"], "dev", world["data"])
    gold = torch.tensor([ex.label for ex in dev.examples])
    probs, member_accuracy = 0, []
    for k in (1, 2):
        ids, logits, _ = soft_targets.read_outputs(world["teachers"] / "rte" / "logits" / f"member-{k}-dev")
        order = [ids.index(ex.id) for ex in dev.examples]
        probs = probs + torch.softmax(torch.from_numpy(logits[order]), -1) / 2
        member_accuracy.append((torch.from_numpy(logits[order]).argmax(-1) == gold).float().mean().item())
    accuracy = (probs.argmax(-1) == gold).float().mean().item()
    assert rte["dev_rows"] == len(dev.examples)
    assert [m["score"] for m in rte["members"]] == pytest.approx(member_accuracy)
    assert member_accuracy == pytest.approx(scores, rel=1e-6)  # the cached outputs are the best checkpoints'
    assert rte["mean"] == pytest.approx(np.mean(scores)) and rte["std"] == pytest.approx(np.std(scores, ddof=1))
    assert rte["ensemble"]["score"] == pytest.approx(accuracy)
    assert [p["members"] for p in rte["disagreement"]["pairs"]] == [[1, 2]]
    assert report["tasks"]["stsb"]["disagreement"]["pairs"][0]["value"] > 0  # members differ
    assert report["average"]["ensemble"] == pytest.approx((rte["ensemble"]["score"]
                                                           + report["tasks"]["stsb"]["ensemble"]["score"]) / 2)
    markdown = (world["teachers"] / "teachers.md").read_text()
    assert "| task | metric | dev rows | member 1 | member 2 | mean ± sd | ensemble |" in markdown and "| 1-2 |" in markdown
    assert f"| rte | accuracy | {len(dev.examples)} |" in markdown
    # what the soft targets carry, on train and dev, recomputed from the same cached logits
    carried = rte["soft_targets"]
    assert carried["dev"]["examples"] == len(dev.examples)
    assert carried["dev"]["agreement_with_gold"] == pytest.approx(accuracy)
    assert carried["dev"]["mean_max_probability"] == pytest.approx(probs.max(-1).values.mean().item(), abs=1e-6)
    assert len(carried["dev"]["member_ece"]) == 2 and 0 <= carried["train"]["ece"] <= 1
    assert carried["temperature_scaling"]["fit_examples"] + carried["temperature_scaling"]["report_examples"] == len(dev.examples)
    assert {"mean_member_spread", "mean_absolute_error"} <= set(report["tasks"]["stsb"]["soft_targets"]["train"])
    assert "| rte | train |" in markdown and "| rte | dev |" in markdown and "| stsb | dev |" in markdown


def student_spec(world, name, **extra):
    doc = {"task_defs": GLUE, "teachers": str(world["teachers"]), "output_dir": str(world["base"] / name),
           "distill": ["rte", "stsb"], "temperature": 2.0, "alpha": 0.5,
           "train": {"max_epochs": 1, "batch_size": 16, "lr": 1.0e-3, "limit_train_examples": 64}, **extra}
    return write_yaml(world["base"] / f"{name}.yaml", doc)


@pytest.fixture(scope="module")
def student(world):
    """The student, with the one-command form (teachers reused, nothing retrained)."""
    from mtdnn import distill
    from mtdnn.training import trainer as train

    spec = student_spec(world, "student")
    with pytest.MonkeyPatch.context() as mp:
        trained = Spy(train.fit, member_of)
        mp.setattr(train, "fit", trained)
        code = distill.main([world["teacher_spec"], spec, "--data-dir", str(world["data"]), "--accelerator", "cpu"])
    assert code == 0 and trained.calls == []
    return world["base"] / "student"


def test_student_report_has_members_ensemble_and_student(world, student):
    from mtdnn.training.runs import read_metrics

    report = json.loads((student / "report.json").read_text())
    teacher_report = json.loads((world["teachers"] / "teachers.json").read_text())
    best = read_metrics(student)["best"]
    for task, metric in (("rte", "accuracy"), ("stsb", "pearson")):
        row = report["tasks"][task]
        assert row["metric"] == metric and len(row["members"]) == 2
        assert row["ensemble"] == teacher_report["tasks"][task]["ensemble"]
        assert row["student"]["score"] == best["tasks"][task][metric]
    assert report["average"]["student"] == pytest.approx((best["tasks"]["rte"]["accuracy"]
                                                          + best["tasks"]["stsb"]["pearson"]) / 2)
    assert report["average"]["mean"] == pytest.approx(np.mean(report["average"]["members"]))
    assert report["student"]["temperature"] == 2.0 and report["student"]["alpha"] == 0.5
    markdown = (student / "report.md").read_text()
    assert "| task | metric | dev rows | member 1 | member 2 | mean ± sd | ensemble | student |" in markdown
    assert "| **average** |" in markdown
    ckpt = torch.load(student / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    hp = ckpt["hyper_parameters"]
    assert hp["distill_tasks"] == ["rte", "stsb"] and hp["temperature"] == 2.0 and hp["alpha"] == 0.5
    assert (student / "export" / "heads.safetensors").is_file()


def test_a_student_scored_on_fewer_dev_rows_is_compared_with_teachers_on_those_rows(world):
    """limit_eval_examples: 20 for the student: the report's members and ensemble are scored on the same first 20
    dev rows, not on all of dev (issue 26: an ensemble on 277 rows beside a student on 100)."""
    from mtdnn import distill
    from mtdnn.tasks.data import load_split
    from mtdnn.training.runs import read_metrics

    spec = student_spec(world, "few-rows", train={"max_epochs": 1, "batch_size": 16, "lr": 1.0e-3,
                                                  "limit_train_examples": 32, "limit_eval_examples": 20})
    assert distill.main([spec, "--data-dir", str(world["data"]), "--accelerator", "cpu"]) == 0
    run = world["base"] / "few-rows"
    report = json.loads((run / "report.json").read_text())
    rte = report["tasks"]["rte"]
    assert rte["dev_rows"] == report["tasks"]["stsb"]["dev_rows"] == 20
    dev = load_split(teachers.load_task_defs(GLUE)["rte"], "dev", world["data"]).examples[:20]
    probs = 0
    for k in (1, 2):
        ids, logits, _ = soft_targets.read_outputs(world["teachers"] / "rte" / "logits" / f"member-{k}-dev")
        probs = probs + torch.softmax(torch.from_numpy(logits[[ids.index(ex.id) for ex in dev]]), -1) / 2
    accuracy = (probs.argmax(-1) == torch.tensor([ex.label for ex in dev])).float().mean().item()
    assert rte["ensemble"]["score"] == pytest.approx(accuracy)
    assert rte["student"]["score"] == read_metrics(run)["best"]["tasks"]["rte"]["accuracy"]  # its 20 rows
    assert "| rte | accuracy | 20 |" in (run / "report.md").read_text()


def test_student_with_gold_task_and_layers_from_the_multitask_run(world):
    from transformers import AutoConfig

    from mtdnn import distill
    from mtdnn.training.runs import read_metrics

    spec = student_spec(world, "small", distill=["rte"], gold=["stsb"], alpha=1.0,
                        init={"encoder": "multitask", "layers": [1]}, from_run=str(world["mt_run"]))
    assert distill.main([spec, "--data-dir", str(world["data"]), "--accelerator", "cpu"]) == 0
    run = world["base"] / "small"
    assert AutoConfig.from_pretrained(run / "export" / "encoder").num_hidden_layers == 1
    report = json.loads((run / "report.json").read_text())
    assert list(report["tasks"]) == ["rte"] and list(report["gold_tasks"]) == ["stsb"]
    assert report["gold_tasks"]["stsb"]["student"]["score"] == read_metrics(run)["best"]["tasks"]["stsb"]["pearson"]


def copy_teachers(world, name) -> Path:
    return Path(shutil.copytree(world["teachers"], world["base"] / name, ignore=shutil.ignore_patterns("checkpoints")))


def run_exit_code(main, argv, capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(main, argv)
    return info.value.code, capsys.readouterr().err


def test_soft_targets_from_other_data_are_an_error(world, capsys):
    from mtdnn import distill

    changed = slice_data(world["data"], world["base"] / "data-changed", drop_last="glue/RTE/train.tsv")
    out = world["base"] / "never"
    code, err = run_exit_code(distill.main, [student_spec(world, "never"), "--data-dir", str(changed)], capsys)
    assert code == 2 and "fingerprint.json: field 'data'" in err and "another version of the data" in err
    assert "95 rows" in err and not out.exists()
    # the teacher build refuses members trained on other data, unless told to retrain them
    code, err = run_exit_code(teachers_cmd.main, [world["teacher_spec"], "--data-dir", str(changed)], capsys)
    assert code == 2 and "member-1.json" in err and "field 'data.train'" in err and "--retrain-changed" in err


def test_a_changed_member_invalidates_its_cached_outputs(world, monkeypatch, capsys):
    from safetensors.torch import load_file, save_file

    from mtdnn import distill
    from mtdnn.fileio import file_digest

    copy = copy_teachers(world, "teachers-changed")
    heads = copy / "rte" / "member-1" / "export" / "heads.safetensors"
    save_file({k: v + 1.0 for k, v in load_file(str(heads)).items()}, str(heads))
    # a member exported again with other weights: its export records the new heads' digest (issue 24: an export
    # whose heads do not match its record is refused, not loaded)
    meta_path = heads.parent / "mtdnn_export.json"
    meta = json.loads(meta_path.read_text())
    meta["digests"]["heads.safetensors"] = file_digest(heads)
    meta_path.write_text(json.dumps(meta))
    spec = student_spec(world, "never2", teachers=str(copy))
    code, err = run_exit_code(distill.main, [spec, "--data-dir", str(world["data"])], capsys)
    assert code == 2 and "field 'member_export'" in err and "member 1 of task 'rte' changed" in err
    assert not (world["base"] / "never2").exists()
    # rebuilding the teachers recomputes that member's outputs only (no training)
    computed = Spy(soft_targets.member_outputs, outputs_of)
    monkeypatch.setattr(soft_targets, "member_outputs", computed)
    assert teachers_cmd.main([world["teacher_spec"], "--teachers-dir", str(copy), "--data-dir", str(world["data"]),
                          "--accelerator", "cpu"]) == 0
    assert computed.calls == [("rte", "member-1", "train"), ("rte", "member-1", "dev")]


@pytest.mark.parametrize("change, named, message", [
    ({"temperature": 0}, "spec", "field 'temperature': Input should be greater than 0"),
    ({"alpha": 1.5}, "spec", "field 'alpha': Input should be less than or equal to 1"),
    ({"distill": ["rte", "mrpc"]}, "spec", "field 'distill': task(s) mrpc have no soft targets"),
    ({"init": {"encoder": "MEMBER"}}, "spec", "field 'init.encoder'"),
    ({"surprise": 1}, "spec", "field 'surprise': Extra inputs are not permitted"),
    ({"teachers": "EMPTY"}, "teachers.yaml", "no teacher build here"),
    ({"teachers": "NO_MEMBER"}, "member-2/export", "checkpoint of teacher member 2 of task 'stsb' not found"),
])
def test_bad_student_input_exits_2_with_nothing_written(world, capsys, change, named, message):
    from mtdnn import distill

    change = dict(change)
    if change.get("teachers") == "EMPTY":
        (world["base"] / "empty").mkdir(exist_ok=True)
        change["teachers"] = str(world["base"] / "empty")
    if change.get("teachers") == "NO_MEMBER":
        copy = copy_teachers(world, "teachers-incomplete")
        shutil.rmtree(copy / "stsb" / "member-2")
        change["teachers"] = str(copy)
    if change.get("init") == {"encoder": "MEMBER"}:
        change["init"] = {"encoder": str(world["teachers"] / "rte" / "member-1" / "export" / "encoder")}
    spec = student_spec(world, "bad", **change)
    code, err = run_exit_code(distill.main, [spec, "--data-dir", str(world["data"])], capsys)
    assert code == 2 and (spec if named == "spec" else named) in err and message in err, err
    if "init" in change:
        assert "never starts from a teacher member" in err
    assert not (world["base"] / "bad").exists()


@pytest.mark.parametrize("change, message", [
    ({"members": 3}, "field 'vary.seed': lists 2 values for 3 members"),
    ({"vary": {"seed": [1, 1]}}, "field 'vary': members 1 and 2 have the same settings"),
    ({"vary": {"seed": [1, 2], "dropout": [0.1, 1.5]}}, "field 'vary.dropout': a dropout must be in [0, 1)"),
    ({"finetune": {"lr": "fast"}}, "field 'finetune.lr': Input should be a valid number (value: 'fast')"),
    ({"tasks": ["rte", "nosuch"]}, "field 'tasks': no task named nosuch"),
])
def test_bad_teacher_input_exits_2_with_nothing_written(world, capsys, change, message):
    doc = yaml.safe_load(Path(world["teacher_spec"]).read_text())
    doc.update(change, output_dir=str(world["base"] / "bad-teachers"))
    spec = write_yaml(world["base"] / "bad-teachers.yaml", doc)
    code, err = run_exit_code(teachers_cmd.main, [spec, "--data-dir", str(world["data"])], capsys)
    assert code == 2 and spec in err and message in err, err
    assert not (world["base"] / "bad-teachers").exists()


def test_missing_multitask_run_exits_2(world, capsys):
    spec = write_yaml(world["base"] / "no-run.yaml", {**yaml.safe_load(Path(world["teacher_spec"]).read_text()),
                                                      "output_dir": str(world["base"] / "no-run")})
    code, err = run_exit_code(teachers_cmd.main, [spec, "--from-run", str(world["base"] / "nowhere"),
                                              "--data-dir", str(world["data"])], capsys)
    assert code == 2 and "--from-run: " in err and "nowhere: run directory does not exist" in err
    assert not (world["base"] / "no-run").exists()


def test_bad_lightning_flag_exits_2_before_any_member_or_student_run(world, capsys):
    from mtdnn import distill

    spec = write_yaml(world["base"] / "flag.yaml", {**yaml.safe_load(Path(world["teacher_spec"]).read_text()),
                                                    "output_dir": str(world["base"] / "flag-teachers")})
    flags = ["--data-dir", str(world["data"]), "--precision", "64-bogus"]
    for main, argv in ((teachers_cmd.main, [spec]), (distill.main, [spec, student_spec(world, "flag-student")])):
        code, err = run_exit_code(main, argv + flags, capsys)
        assert code == 2 and "Lightning rejects" in err and "--precision 64-bogus" in err, err
    assert not (world["base"] / "flag-teachers").exists() and not (world["base"] / "flag-student").exists()


# ------------------------------------------------------------------------------ out-of-fold (cross-fitted) teachers

@pytest.fixture(scope="module")
def crossfit(world):
    from mtdnn.distillation.teachers import build
    from mtdnn.distillation.specs import TeacherSpec

    spec = TeacherSpec.model_validate({
        "task_defs": GLUE, "from_run": str(world["mt_run"]), "output_dir": str(world["base"] / "teachers-oof"),
        "tasks": ["rte"], "members": 1, "cross_fit": 2, "fold_seed": 3, "vary": {"seed": [5], "data_seed": [9]},
        "finetune": {"max_epochs": 1, "batch_size": 16, "lr": 1e-3}})
    return build(spec, "oof.yaml", world["data"], lightning={"accelerator": "cpu", "devices": 1}), spec


def test_out_of_fold_soft_targets_come_from_members_that_never_saw_the_example(world, crossfit):
    from mtdnn.distillation.folds import FOLD_SPLIT, fold_task
    from mtdnn.tasks.data import load_split
    from mtdnn.tasks.taskdef import load_task_defs

    teacher_dir, spec = crossfit
    task = load_task_defs(GLUE)["rte"]
    train_ids = [ex.id for ex in load_split(task, "train", world["data"]).examples]
    manifest = soft_targets.read_manifest(teacher_dir)
    assert manifest["cross_fit"] == {"k": 2, "seed": 3}
    assert [(m["member"], m["fold"], m["data_seed"]) for m in manifest["tasks"]["rte"]["members"]] == [(1, 1, 9), (2, 2, 9)]
    seen_by, cached = {}, {}
    for k, fold in ((1, 1), (2, 2)):
        ftask = fold_task(task, 2, fold, 3)
        trained_on = {ex.id for ex in load_split(ftask, "train", world["data"]).examples}
        ids, logits, _ = soft_targets.read_outputs(soft_targets.logits_dir(teacher_dir, "rte", k, "train"))
        assert not trained_on & set(ids)  # the member's soft targets are only for rows it did not train on
        assert trained_on | set(ids) == set(train_ids)
        heldout = [ex.id for ex in load_split(ftask, FOLD_SPLIT, world["data"]).examples]
        assert sorted(ids) == sorted(heldout)
        # and the member really trained on the fold's complement: its run's task definitions are the fold's
        run_config = yaml.safe_load((teacher_dir / "rte" / f"member-{k}" / "config.yaml").read_text())
        assert Path(run_config["task_defs"]).name == f"fold-{fold}.yaml" and run_config["data_seed"] == 9
        seen_by.update({i: k for i in ids})
        cached.update(dict(zip(ids, logits)))
    assert sorted(seen_by) == sorted(train_ids)  # the folds partition the training set
    outputs = soft_targets.teacher_outputs(teacher_dir, task, "train", world["data"], train_ids)
    assert outputs.shape == (len(train_ids), 1, 2)
    for row, i in enumerate(train_ids):
        np.testing.assert_array_equal(outputs[row, 0], cached[i])
    report = json.loads((teacher_dir / "teachers.json").read_text())
    rte = report["tasks"]["rte"]
    assert [f["fold"] for f in rte["folds"]] == [1, 2]
    assert rte["fold_mean"] == pytest.approx(np.mean([f["score"] for f in rte["folds"]]))
    assert rte["ensemble_gain"] == pytest.approx(rte["ensemble"]["score"] - rte["mean"])
    assert "Out-of-fold teachers" in (teacher_dir / "teachers.md").read_text()


def test_member_settings_vary_and_must_differ():
    from pydantic import ValidationError

    from mtdnn.distillation.specs import TeacherSpec
    from mtdnn.distillation.teachers import enumerate_members, member_config

    spec = TeacherSpec.model_validate({"task_defs": GLUE, "output_dir": "x", "tasks": ["rte"], "members": 2,
                                       "cross_fit": 3, "vary": {"seed": [1, 1], "data_seed": [1, 2],
                                                                "lr": [1e-5, 2e-5], "max_epochs": [1, 2]}})
    members = enumerate_members(spec)
    assert [(k, f) for k, f, _ in members] == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)]
    config = member_config(spec, "rte", members[1][2], Path("."), "enc", Path("mt"), Path("out"))
    assert (config.seed, config.data_seed, config.lr, config.max_epochs) == (1, 2, 2e-5, 2)
    with pytest.raises(ValidationError, match="same settings"):
        TeacherSpec.model_validate({"task_defs": GLUE, "output_dir": "x", "tasks": ["rte"], "members": 2,
                                    "vary": {"seed": [1, 1]}})
    with pytest.raises(ValidationError, match="finite number"):
        TeacherSpec.model_validate({"task_defs": GLUE, "output_dir": "x", "tasks": ["rte"], "members": 1,
                                    "vary": {"lr": ["inf"]}})
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        TeacherSpec.model_validate({"task_defs": GLUE, "output_dir": "x", "tasks": ["rte"], "cross_fit": 1})


def test_paired_comparison_runs_both_arms_seed_for_seed(world, capsys):
    from mtdnn import distill
    from mtdnn.training.runs import read_metrics

    spec = student_spec(world, "paired", init={"encoder": "multitask"}, distill=["rte"],
                        train={"max_epochs": 1, "batch_size": 16, "lr": 1.0e-3, "limit_train_examples": 32, "seed": 7})
    out = world["base"] / "paired-out"
    assert distill.main([spec, "--seeds", "2", "--bootstrap-resamples", "200", "--data-dir", str(world["data"]),
                         "--accelerator", "cpu", "--output-dir", str(out)]) == 0
    result = json.loads((out / "comparison.json").read_text())
    assert result["seeds"] == [7, 8]
    for arm, alpha in (("distilled", 0.5), ("gold-only", 0.0)):
        for i, seed in enumerate((7, 8)):
            run = out / f"seed-{seed}" / arm
            resolved = yaml.safe_load((run / "config.yaml").read_text())
            assert resolved["seed"] == seed and resolved["resolved"]["student"]["alpha"] == alpha
            # the analysed scores are recomputed from the runs' dev predictions and equal the logged ones
            logged = read_metrics(run)["best"]["tasks"]["rte"]["accuracy"]
            assert result["tasks"]["rte"][arm]["per_seed"][i] == pytest.approx(logged, abs=1e-6)
    # same seed, same schedule: the arms differ only in alpha
    for seed in (7, 8):
        a, b = ((out / f"seed-{seed}" / arm / "schedule.json").read_text() for arm in ("distilled", "gold-only"))
        assert a == b
    assert {"low", "high"} <= set(result["average"]["difference"]) and result["average"]["bootstrap"]["resamples"] == 200
    assert "| **average** |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        run_cli(distill.main, [spec, "--seeds", "1", "--data-dir", str(world["data"]), "--output-dir",
                               str(world["base"] / "paired-1")])
    assert exit_info.value.code == 2 and "at least 2 seeds" in capsys.readouterr().err
    assert not (world["base"] / "paired-1").exists()


# ------------------------------------------------------------------------------ one pipeline (issue 25, part 1)


class Reached(Exception):
    """Raised by the patched pipeline.execute: the path got there, with its plan."""


def test_teacher_members_and_the_student_reach_the_pipelines_execute(world, monkeypatch):
    from mtdnn.distillation.specs import TeacherSpec, load_spec
    from mtdnn.distillation.student import StudentSpec, distill
    from mtdnn.training import pipeline

    plans = []

    def execute(plan, callbacks=None):
        plans.append(plan)
        raise Reached(plan.document["resolved"]["command"])

    monkeypatch.setattr(pipeline, "execute", execute)
    spec = load_spec(world["teacher_spec"], TeacherSpec, "teacher")
    with pytest.raises(Reached, match="train"):
        teachers.build(spec, "spec", world["data"], output_dir=str(world["base"] / "pipeline-teachers"))
    student = load_spec(student_spec(world, "pipeline-student"), StudentSpec, "student")
    with pytest.raises(Reached, match="distill"):
        distill(student, "spec", data_dir=world["data"])
    member, trained = plans
    assert member.config.tasks == ["rte"] and member.config.init_from == str(world["mt_run"].resolve())
    assert type(trained.module).__name__ == "DistillationModule" and trained.config.max_epochs == 1
    assert not (world["base"] / "pipeline-student").exists()  # planning creates nothing


def test_a_student_too_long_for_its_encoder_exits_2_before_anything_is_written(world, capsys):
    from mtdnn import distill

    spec = student_spec(world, "too-long", train={"max_epochs": 1, "max_length": 1024})
    with pytest.raises(SystemExit) as exit_info:
        run_cli(distill.main, [spec, "--data-dir", str(world["data"]), "--accelerator", "cpu"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "max length 1024" in err and "512 positions" in err, err
    assert not (world["base"] / "too-long").exists()


def test_an_interrupted_student_resumes_to_the_metrics_of_an_uninterrupted_one(world, monkeypatch, capsys):
    """SIGTERM mid-epoch, --resume, and metrics.json equals an uninterrupted run's exactly (deterministic)."""
    from mtdnn import distill

    common = ["--data-dir", str(world["data"]), "--accelerator", "cpu"]
    train = {"max_epochs": 2, "batch_size": 16, "lr": 1.0e-3, "limit_train_examples": 64, "deterministic": True}
    whole = student_spec(world, "student-whole", train=train)
    assert distill.main([whole, *common]) == 0
    cut = student_spec(world, "student-cut", train=train)
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "3")  # mid-epoch 1 (4 batches of 2 tasks' 64 + 64 rows: 8 per epoch)
    assert distill.main([cut, *common]) == 143
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    run = world["base"] / "student-cut"
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "metrics.json").exists()
    capsys.readouterr()
    # without --resume or --overwrite the interrupted run is refused and left as it is
    with pytest.raises(SystemExit) as exit_info:
        run_cli(distill.main, [cut, *common])
    assert exit_info.value.code == 2 and "interrupted run" in capsys.readouterr().err
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert distill.main([cut, *common, "--resume"]) == 0
    a, b = (json.loads((world["base"] / n / "metrics.json").read_text()) for n in ("student-whole", "student-cut"))
    assert a["epochs"] == b["epochs"] and len(a["epochs"]) == 2
    assert (run / "report.md").is_file()


def test_a_complete_arm_is_reused_only_for_the_same_settings(world, capsys):
    from mtdnn import distill

    spec = student_spec(world, "paired", init={"encoder": "multitask"}, distill=["rte"],
                        train={"max_epochs": 1, "batch_size": 16, "lr": 1.0e-3, "limit_train_examples": 32, "seed": 7})
    out = world["base"] / "paired-reuse"
    args = [spec, "--seeds", "2", "--bootstrap-resamples", "50", "--data-dir", str(world["data"]),
            "--accelerator", "cpu", "--output-dir", str(out)]
    assert distill.main(args) == 0
    stamp = (out / "seed-7" / "distilled" / "metrics.json").stat().st_mtime_ns
    assert distill.main(args) == 0  # the same comparison: every arm reused
    assert (out / "seed-7" / "distilled" / "metrics.json").stat().st_mtime_ns == stamp
    changed = student_spec(world, "paired", init={"encoder": "multitask"}, distill=["rte"], temperature=4.0,
                           train={"max_epochs": 1, "batch_size": 16, "lr": 1.0e-3, "limit_train_examples": 32,
                                  "seed": 7})
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_cli(distill.main, [changed, *args[1:]])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "distilled arm of seed 7" in err and "student.temperature" in err, err


def test_member_records_written_before_the_schema_moved_still_match():
    """A real member record of the issue-30 campaign (written at 6055bfe): its finetune settings are what the
    shipped spec gives today, so the member is not reported built differently."""
    from mtdnn.distillation.specs import TeacherSpec, finetune_record, load_spec

    record = json.loads((ROOT / "tests" / "fixtures" / "member-record-6055bfe.json").read_text())
    spec = load_spec(ROOT / "teachers" / "nli-oof.yaml", TeacherSpec, "teacher")
    assert finetune_record(spec.finetune) == record["finetune"]
    assert teachers._first_difference(record["finetune"], finetune_record(spec.finetune)) is None
    longer = spec.model_copy(update={"finetune": type(spec.finetune).model_validate({"max_epochs": 2, "max_steps": 5})})
    assert finetune_record(longer.finetune) == {**record["finetune"], "max_steps": 5}  # a new field: recorded
