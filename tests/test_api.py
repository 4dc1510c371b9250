"""TrainConfig, --config reruns, the Python API and the trainer's step-level features, on tiny encoders."""

import json
from pathlib import Path

import pytest
import torch
import yaml

import mtdnn
from mtdnn.errors import CheckpointError, ConfigError, run_cli
from mtdnn.train import main

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


def tiny_config(tmp_path, data_dir, encoder, **changes) -> "mtdnn.TrainConfig":
    settings = dict(task_defs=GLUE, tasks=["rte", "stsb"], data_dir=str(data_dir), encoder=encoder,
                    output_dir=str(tmp_path / "run"), limit_train_examples=32, batch_size=16, max_epochs=1,
                    accelerator="cpu", devices=1)
    return mtdnn.TrainConfig(**{**settings, **changes})


# ------------------------------------------------------------------------------------------------ TrainConfig


@pytest.mark.parametrize("field, value, message", [
    ("lr", float("nan"), "finite number"),
    ("warmup_ratio", 1.5, "less than 1"),
    ("accumulate_grad_batches", 0, "greater than 0"),
    ("loggers", ["csv", "comet"], "'csv', 'tensorboard', 'wandb' or 'mlflow'"),
    ("surprise", 1, "Extra inputs are not permitted"),
    ("tasks", ["rte", "rte"], "lists a task twice"),
])
def test_bad_config_fields_name_the_file_field_and_value(tmp_path, field, value, message):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"task_defs": GLUE, field: value}))
    with pytest.raises(ConfigError) as err:
        mtdnn.fit(path)
    assert str(path) in str(err.value) and message in str(err.value), err.value
    assert not (tmp_path / "run").exists()


def test_config_flags_map_to_fields_and_bad_values_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [GLUE, "--warmup-ratio", "1.5", "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "argument --warmup-ratio: must be a finite number in [0, 1) (got 1.5)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, ["--max-epochs", "1"])  # neither task definitions nor --config
    assert exit_info.value.code == 2 and "--config" in capsys.readouterr().err


def test_config_yaml_reruns_the_same_run_exactly(tmp_path, data_dir, tiny_encoder, capsys):
    first = tmp_path / "first"
    assert main([GLUE, "--tasks", "rte,stsb", "--data-dir", str(data_dir), "--encoder", tiny_encoder,
                 "--limit-train-examples", "32", "--batch-size", "16", "--max-epochs", "2", "--accelerator", "cpu",
                 "--deterministic", "--output-dir", str(first)]) == 0
    written = yaml.safe_load((first / "config.yaml").read_text())
    assert written["resolved"]["command"] == "train" and set(written["resolved"]["tasks"]) == {"rte", "stsb"}
    config = mtdnn.Run(first).config
    assert config.tasks == ["rte", "stsb"] and config.deterministic and config.output_dir == str(first)
    capsys.readouterr()
    again = tmp_path / "again"
    assert main(["--config", str(first / "config.yaml"), "--output-dir", str(again)]) == 0
    assert f"override: --output-dir {again}" in capsys.readouterr().err
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (first, again))
    assert a["epochs"] == b["epochs"] and a["best"] == b["best"]  # exactly: same process and thread count
    rerun = yaml.safe_load((again / "config.yaml").read_text())
    assert {**rerun, "output_dir": None} == {**written, "output_dir": None}
    with pytest.raises(SystemExit) as exit_info:  # a student's config.yaml is not a training config
        (again / "config.yaml").write_text(yaml.safe_dump({**rerun, "resolved": {"command": "distill"}}))
        run_cli(main, ["--config", str(again / "config.yaml")])
    assert exit_info.value.code == 2 and "mtdnn.distill" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the API


@pytest.fixture(scope="module")
def api_run(tmp_path_factory, data_dir, tiny_encoder):
    tmp = tmp_path_factory.mktemp("api")
    return mtdnn.fit(tiny_config(tmp, data_dir, tiny_encoder).model_dump())  # a mapping of fields is validated


def test_fit_returns_the_run_and_load_predicts_raw_text(api_run, data_dir):
    assert api_run.complete and api_run.best == api_run.metrics["best"] and api_run.export.is_dir()
    model = mtdnn.load(api_run.export)
    assert set(model.tasks) == {"rte", "stsb"}
    pairs = [("The cat sat on the mat.", "A cat was sitting."), ("It rained.", "The ground is dry.")]
    predictions = model.predict(pairs, task="rte")
    assert len(predictions) == 2
    for p in predictions:
        assert set(p["probabilities"]) == {"entailment", "not_entailment"}
        assert sum(p["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
        assert p["prediction"] == max(p["probabilities"], key=p["probabilities"].get)
    assert isinstance(model.predict(pairs[0], task="stsb")[0]["prediction"], float)
    # the run's best dev scores, from the export alone
    scores = model.evaluate("rte", "dev")
    assert scores["tasks"]["rte"] == pytest.approx(api_run.best["tasks"]["rte"], abs=1e-6)


def test_api_errors_are_the_commands_errors(api_run, tmp_path):
    model = mtdnn.load(api_run.directory)
    with pytest.raises(ConfigError, match="several tasks"):
        model.predict(["one text"])
    with pytest.raises(mtdnn.errors.DataError, match="takes 2 text"):
        model.predict(["only a premise"], task="rte")
    with pytest.raises(ConfigError, match="task 'cola' was not trained by this model"):
        model.evaluate("cola")
    with pytest.raises(CheckpointError, match="run directory does not exist"):
        mtdnn.load(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="holds a complete run"):
        mtdnn.fit(mtdnn.Run(api_run.directory).config)


# ------------------------------------------------------------------------------------- trainer features


def test_accumulated_loss_normaliser_equals_one_big_batch(tiny_encoder, tokenizer, tmp_path):
    """Two accumulated batches of 5 and 3 real examples give the gradient of one batch of the 8 (sum / 8)."""
    from types import SimpleNamespace

    from mtdnn.tasks.collate import collate
    from mtdnn.tasks.tokenized import tokenize_examples
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.tasks.data import Example
    from mtdnn.training.module import MultiTaskModule

    task = load_task_defs(GLUE)["rte"]
    examples = [Example(id=str(i), line=i, text_a=f"premise number {i} " * (i + 1), text_b="a hypothesis",
                        label=i % 2) for i in range(8)]
    split = tokenize_examples(examples, task, tokenizer)
    plain = task.to_plain()
    assert plain["head"]["type"] == "san"  # glue.yaml's RTE head; its random step dropout off, as dropout is
    plain["head"]["step_dropout"] = 0.0
    module = MultiTaskModule(tiny_encoder, {"rte": plain}, dropout=0.0)

    def gradients(groups, accumulation):
        module.zero_grad()
        module._trainer = SimpleNamespace(world_size=1, accumulate_grad_batches=accumulation)
        for rows in groups:
            batch = collate([split[i] for i in rows], task, tokenizer.pad_token_id)
            batch.global_examples = 8
            (module.task_loss(batch, module(batch)) / accumulation).backward()  # Lightning divides by K
        module._trainer = None
        return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}

    accumulated = gradients([range(5), range(5, 8)], accumulation=2)
    whole = gradients([range(8)], accumulation=1)
    for name, grad in whole.items():
        assert torch.allclose(accumulated[name], grad, atol=1e-6), name


def test_sampler_counts_the_real_examples_of_each_optimizer_step():
    from mtdnn.tasks.schedule import MultiTaskBatchSampler, TaskSize

    sampler = MultiTaskBatchSampler([TaskSize([5] * 20), TaskSize([5] * 9)], batch_size=8, seed=1,
                                    accumulate_grad_batches=2)
    plan = sampler.plan(0)
    batches = list(sampler)
    for i, batch in enumerate(batches):
        group = plan[i - i % 2: i - i % 2 + 2]
        assert {key[3] for key in batch} == {sum(len(rows) for _, rows in group)}


def test_max_steps_eval_every_n_steps_early_stopping_and_loggers(tmp_path, data_dir, tiny_encoder):
    pytest.importorskip("wandb")
    # lr 1e-12: the dev accuracy never changes, so early stopping (patience 2) stops after the third evaluation
    config = tiny_config(tmp_path, data_dir, tiny_encoder, tasks=["rte"], lr=1e-12, max_epochs=3, batch_size=8,
                         accumulate_grad_batches=2, eval_every_n_steps=1, early_stopping_patience=2,
                         loggers=["csv", "wandb"])
    run = mtdnn.fit(config)
    metrics = run.metrics
    assert [e["step"] for e in metrics["epochs"]] == [1, 2, 3]
    assert metrics["stopped_early"]["step"] == 3 and metrics["best"]["step"] == 1
    assert (run.directory / "logs" / "metrics.csv").is_file()
    assert list((run.directory / "logs" / "wandb").glob("offline-run-*"))  # W&B offline, under the run
    schedule = json.loads(run.schedule_path.read_text())
    assert schedule["accumulate_grad_batches"] == 2 and schedule["steps"] == 6  # 3 steps of 2 batches

    capped = mtdnn.fit(config.updated(output_dir=str(tmp_path / "capped"), max_steps=2, eval_every_n_steps=None,
                                      early_stopping_patience=None, loggers=["csv"], lr=1e-3))
    assert json.loads(capped.schedule_path.read_text())["steps"] == 4  # max 2 optimizer steps of 2 batches
    with pytest.raises(ConfigError, match="--eval-every-n-steps 99: the run has only"):
        mtdnn.fit(config.updated(output_dir=str(tmp_path / "never"), eval_every_n_steps=99))
    assert not (tmp_path / "never").exists()


def test_transfer_api_runs_a_sweep_from_a_spec(tmp_path, data_dir, tiny_encoder):
    with pytest.raises(ConfigError, match="give --sizes"):
        mtdnn.transfer(task="snli", encoders=[tiny_encoder])
    report = mtdnn.transfer(task="snli", task_defs=GLUE, encoders=[f"tiny={tiny_encoder}"], sizes=[6], seeds=1,
                            data_dir=str(data_dir), output_dir=str(tmp_path / "out"), limit_eval_examples=16,
                            accelerator="cpu")
    [row] = report["results"]["tiny"]
    assert row["n_examples"] == 6 and len(row["accuracies"]) == 1 and 0 <= row["accuracies"][0] <= 1
    assert json.loads((tmp_path / "out" / "results.json").read_text())["results"] == report["results"]


def test_mlflow_logger_writes_local_files(tmp_path, data_dir, tiny_encoder):
    pytest.importorskip("mlflow")
    run = mtdnn.fit(tiny_config(tmp_path, data_dir, tiny_encoder, tasks=["rte"], loggers=["mlflow"]))
    assert list((run.directory / "logs" / "mlruns").rglob("meta.yaml"))


def test_a_logger_that_is_not_installed_is_a_config_error(tmp_path, data_dir, tiny_encoder, monkeypatch):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "mlflow" else real_import(name, *a, **k))
    with pytest.raises(ConfigError, match="--loggers mlflow: the mlflow package is not installed"):
        mtdnn.fit(tiny_config(tmp_path, data_dir, tiny_encoder, loggers=["csv", "mlflow"]))
    assert not (tmp_path / "run").exists()


def test_import_is_light_and_commands_double_as_api_functions():
    import subprocess
    import sys

    code = "import sys, mtdnn; assert 'torch' not in sys.modules and 'pytorch_lightning' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ,
                          "PYTHONPATH": str(ROOT)}).returncode == 0
    import mtdnn.distill  # noqa: F401 (the python -m entry point, imported as a module)

    assert callable(mtdnn.distill) and callable(mtdnn.distill.main) and callable(mtdnn.transfer.main)
    with pytest.raises(ConfigError, match="give --sizes"):
        mtdnn.transfer(task="snli", encoders=["packaged-minilm"])  # the module forwards to mtdnn.api.transfer


def test_loggers_are_csv_by_default_and_follow_their_own_environment(tmp_path, monkeypatch):
    """Issue 27 part 7: TensorBoard only when asked for; W&B offline and MLflow local unless $WANDB_MODE /
    $MLFLOW_TRACKING_URI say otherwise."""
    from mtdnn.training.config import TrainConfig
    from mtdnn.training.logs import ResumableCSVLogger, build_loggers, mlflow_tracking_uri, wandb_offline

    config = TrainConfig(task_defs=GLUE, tasks=["rte"])
    loggers = build_loggers(config, tmp_path / "run")
    assert [type(lg) for lg in loggers] == [ResumableCSVLogger]
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert wandb_offline() is True
    assert mlflow_tracking_uri(tmp_path / "run") == (tmp_path / "run" / "logs" / "mlruns").resolve().as_uri()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert wandb_offline() is False
    assert mlflow_tracking_uri(tmp_path / "run") == "http://tracking.example:5000"
