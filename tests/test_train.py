"""End-to-end training on real data slices with a tiny encoder, the run directory, export and bad input."""

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from mtdnn.errors import run_cli
from mtdnn.train import main

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def train_args(run_dir, data_dir, encoder, *extra):
    return [GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", encoder,
            "--limit-train-examples", "64", "--batch-size", "16", "--max-epochs", "2", "--accelerator", "cpu",
            "--output-dir", str(run_dir), *extra]


@pytest.fixture(scope="module")
def two_task_run(tmp_path_factory, data_dir, tiny_encoder):
    run_dir = tmp_path_factory.mktemp("runs") / "rte-stsb"
    assert main(train_args(run_dir, data_dir, tiny_encoder)) == 0
    return run_dir


def test_run_directory_metrics_and_schedule(two_task_run):
    metrics = json.loads((two_task_run / "metrics.json").read_text())
    assert metrics["status"] == "complete" and [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    for epoch in metrics["epochs"]:
        assert set(epoch["tasks"]) == {"rte", "stsb"}
        assert set(epoch["tasks"]["stsb"]) == {"pearson", "spearman"}
        assert epoch["average"] == pytest.approx((epoch["tasks"]["rte"]["accuracy"] + epoch["tasks"]["stsb"]["pearson"]) / 2)
    best = max(metrics["epochs"], key=lambda e: e["average"])
    assert metrics["best"]["epoch"] == best["epoch"] and metrics["best"]["tasks"] == best["tasks"]
    assert (two_task_run / metrics["best"]["checkpoint"]).is_file()

    schedule = json.loads((two_task_run / "schedule.json").read_text())
    assert schedule["batches_per_task"] == {"rte": 8, "stsb": 8} and schedule["steps"] == 16
    first = schedule["epochs"][0]["steps"]
    assert sorted(first) != first and sorted(first, reverse=True) != first  # interleaved
    assert schedule["epochs"][0]["steps"] != schedule["epochs"][1]["steps"]
    assert (two_task_run / "config.yaml").is_file() and (two_task_run / "logs" / "metrics.csv").is_file()


def test_checkpoints_load_with_weights_only(two_task_run):
    ckpt = torch.load(two_task_run / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["hyper_parameters"]["tasks"]["rte"]["type"] == "classification"
    assert "model.heads.stsb.out.weight" in ckpt["state_dict"]
    assert "optimizer_states" not in ckpt  # best.ckpt holds the weights only
    # last.ckpt (optimizer state, for --resume) is removed once the run is complete
    assert sorted(p.name for p in (two_task_run / "checkpoints").iterdir()) == ["best.ckpt"]


def test_export_round_trip_matches_the_best_checkpoint(two_task_run, data_dir):
    from transformers import AutoModel

    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.training.export import load_export
    from mtdnn.training.module import MultiTaskModule

    model, tokenizer, tasks = load_export(two_task_run / "export")
    assert list(tasks) == ["rte", "stsb"]
    module = MultiTaskModule.load_from_checkpoint(two_task_run / "checkpoints" / "best.ckpt", map_location="cpu",
                                                  weights_only=True)
    module.eval()
    split = tokenized_split(tasks["rte"], "dev", data_dir, tokenizer)
    batch = collate([split[i] for i in range(8)], tasks["rte"], tokenizer.pad_token_id)
    with torch.no_grad():
        exported = model("rte", batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.head_inputs)
        original = module(batch)
    assert torch.allclose(exported, original, atol=1e-6)
    encoder = AutoModel.from_pretrained(two_task_run / "export" / "encoder")
    assert encoder.config.hidden_size == 32


def test_complete_run_is_refused_without_overwrite(two_task_run, data_dir, tiny_encoder, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, train_args(two_task_run, data_dir, tiny_encoder))
    assert exit_info.value.code == 2
    assert "holds a complete run" in capsys.readouterr().err


def test_init_from_copies_encoder_and_matching_heads(two_task_run, data_dir, tmp_path):
    from mtdnn.training.export import load_export
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.training.resolve import copy_matching_heads

    model, _, tasks = load_export(two_task_run / "export")
    fresh = MultiTaskModule(str(two_task_run / "export" / "encoder"), {n: t.to_plain() for n, t in tasks.items()})
    assert copy_matching_heads(fresh.model, two_task_run / "export", tasks) == ["rte", "stsb"]
    for (name, a), b in zip(model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_init_from_warns_of_an_ignored_encoder_only_when_it_differs(two_task_run, data_dir, tiny_encoder, tmp_path,
                                                                   caplog):
    """A teacher member names the run's own pre-trained encoder beside --init-from: no warning then (issue 26)."""
    from mtdnn.training.config import TrainConfig
    from mtdnn.training.pipeline import plan

    def warnings_for(encoder):
        caplog.clear()
        config = TrainConfig(task_defs=GLUE, tasks=["rte"], data_dir=str(data_dir), encoder=encoder,
                             init_from=str(two_task_run), output_dir=str(tmp_path / encoder.replace("/", "_")),
                             limit_train_examples=16, accelerator="cpu")
        plan(config)  # creates nothing
        return [r.getMessage() for r in caplog.records if "is ignored" in r.getMessage()]

    assert warnings_for(tiny_encoder) == []  # the run's source encoder
    assert warnings_for(str(two_task_run / "export" / "encoder")) == [
        f"--encoder {two_task_run / 'export' / 'encoder'} is ignored: --init-from {two_task_run} gives the encoder"]


def test_interrupted_run_keeps_last_checkpoint_and_writes_no_metrics(tmp_path, data_dir, tiny_encoder, monkeypatch):
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "10")  # SIGTERM after step 10; epoch 1 has 8 steps
    run_dir = tmp_path / "interrupted"
    assert main(train_args(run_dir, data_dir, tiny_encoder)) == 143
    assert not (run_dir / "metrics.json").exists()
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["global_step"] == 10
    assert not list((run_dir / "checkpoints").glob("*.tmp"))


def test_epochs_are_reshuffled_inside_a_lightning_fit(data_dir, tiny_encoder, tokenizer):
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.module import MultiTaskModule
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    tasks = select_tasks(load_task_defs(GLUE), ["rte", "mrpc"], GLUE)
    seen: dict[int, list] = {}

    class Record(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.setdefault(trainer.current_epoch, []).append((batch.task, batch.idx.tolist()))

    datamodule = MultiTaskDataModule(tasks, data_dir, tokenizer, batch_size=8, limit_train_examples=24, seed=3)
    module = MultiTaskModule(tiny_encoder, {n: t.to_plain() for n, t in tasks.items()})
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False,
                         callbacks=[Record()])
    trainer.fit(module, datamodule=datamodule)
    assert len(seen[0]) == len(seen[1]) == 6
    assert seen[0] != seen[1]
    for epoch in (0, 1):
        for task in ("rte", "mrpc"):
            rows = sorted(r for t, idx in seen[epoch] if t == task for r in idx)
            assert rows == list(range(24))


def test_fp16_checkpoint_trains_in_float32(tmp_path, data_dir):
    from conftest import make_tiny_encoder

    from mtdnn.modeling.model import load_encoder

    encoder_dir = make_tiny_encoder(tmp_path / "fp16", dtype=torch.float16)
    assert all(p.dtype == torch.float32 for p in load_encoder(str(encoder_dir)).parameters())
    run_dir = tmp_path / "run"
    assert main(train_args(run_dir, data_dir, str(encoder_dir), "--max-epochs", "1", "--keep-last-checkpoint")) == 0
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert "optimizer_states" in ckpt  # kept on request, with what --resume needs
    assert all(v.dtype == torch.float32 for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best"]["average"] == metrics["best"]["average"]  # not NaN


def tokenizerless(tmp: Path) -> Path:
    """An encoder folder with weights but no tokenizer files."""
    from conftest import make_tiny_encoder

    path = make_tiny_encoder(tmp / "no-tokenizer")
    for f in path.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            f.unlink()
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a, tmp: a.__setitem__(a.index("--encoder") + 1, str(tmp / "no-such-encoder")), "cannot load"),
        (lambda a, tmp: a.__setitem__(a.index("--tasks") + 1, "rte,nosuch"), "no task named nosuch"),
        (lambda a, tmp: a.__setitem__(a.index("--tasks") + 1, "qnli"), "has no train split"),
        (lambda a, tmp: a.__setitem__(a.index("--data-dir") + 1, str(tmp)), "file not found"),
        (lambda a, tmp: a.__setitem__(a.index("--batch-size") + 1, "0"), "positive integer"),
        (lambda a, tmp: a.extend(["--precision", "bogus"]), "Lightning rejects"),
        (lambda a, tmp: a.extend(["--devices", "0"]), "Lightning rejects"),
        (lambda a, tmp: a.extend(["--max-length", "1000"]), "exceeds the encoder's 512 positions"),
        (lambda a, tmp: a.__setitem__(a.index("--encoder") + 1, str(tokenizerless(tmp))), "no usable tokenizer"),
    ],
)
def test_bad_input_exits_2_without_a_run_directory(tmp_path, data_dir, tiny_encoder, capsys, mutate, message):
    run_dir = tmp_path / "run"
    args = train_args(run_dir, data_dir, tiny_encoder)
    mutate(args, tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()


def test_bad_task_definition_exits_2(tmp_path, data_dir, tiny_encoder, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  rte:\n    type: classifier\n    splits: {train: {path: glue/RTE/train.tsv}}\n"
                   "    text: [sentence1, sentence2]\n    label: label\n    labels: [entailment, not_entailment]\n")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [str(bad), "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                       "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and str(bad) in err and "field 'type'" in err and "classifier" in err


def test_compiled_encoder_checkpoints_keep_plain_parameter_names(tmp_path, data_dir, tiny_encoder):
    from mtdnn.training.export import load_export

    run_dir = tmp_path / "compiled"
    assert main(train_args(run_dir, data_dir, tiny_encoder, "--max-epochs", "1", "--compile", "eager")) == 0
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    assert not [k for k in ckpt["state_dict"] if "_orig_mod" in k]
    assert "model.encoder.embeddings.word_embeddings.weight" in ckpt["state_dict"]
    load_export(run_dir / "export")


def test_default_relative_output_dir(tmp_path, data_dir, tiny_encoder, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a for a in train_args("unused", data_dir, tiny_encoder, "--max-epochs", "1")]
    i = args.index("--output-dir")
    del args[i:i + 2]
    assert main(args) == 0
    run_dir = Path("runs") / "glue-rte-stsb-seed42-limited-train64"  # relative; a limited run says so
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best"]["checkpoint"] == "checkpoints/best.ckpt"


def test_without_tasks_every_task_with_a_train_split_is_trained(tmp_path, data_dir, tiny_encoder):
    import yaml

    glue = yaml.safe_load(Path(GLUE).read_text())
    defs = tmp_path / "two.yaml"
    defs.write_text(yaml.safe_dump({"tasks": {"rte": glue["tasks"]["rte"], "qnli": glue["tasks"]["qnli"]}}))
    assert "train" not in glue["tasks"]["qnli"]["splits"]  # QNLI is dev-only here: evaluation, not training
    args = train_args(tmp_path / "run", data_dir, tiny_encoder, "--max-epochs", "1")
    args[0] = str(defs)
    del args[1:3]  # no --tasks
    assert main(args) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert list(metrics["best"]["tasks"]) == ["rte"]
