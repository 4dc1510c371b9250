"""One training pipeline, one settings schema (issue 25): every training path plans and executes through
``mtdnn.training.pipeline``; ``pl.Trainer`` is built only there; one rule for unfinished run directories; the
schema is ``TrainConfig``'s fields."""

import ast
import json
from pathlib import Path

import pytest
import yaml

from mtdnn.errors import run_cli
from mtdnn.training import pipeline
from mtdnn.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
GLUE = str(ROOT / "task_defs" / "glue.yaml")


class Reached(Exception):
    """Raised by the patched ``pipeline.execute``."""


@pytest.fixture
def reached(monkeypatch):
    plans = []

    def execute(plan, callbacks=None):
        plans.append(plan)
        raise Reached()

    monkeypatch.setattr(pipeline, "execute", execute)
    return plans


def test_pl_trainer_is_constructed_only_in_the_pipeline():
    sites = []
    for path in sorted((ROOT / "mtdnn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name == "Trainer":
                    sites.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert sites and all(s.startswith("mtdnn/training/fitting.py:") for s in sites), sites
    assert len(sites) == 1, sites


def test_train_and_partial_input_reach_execute(reached, tmp_path, data_dir, tiny_encoder):
    from mtdnn.evaluation.diagnostics.partial_input import Recipe, train_variant
    from mtdnn.tasks.taskdef import load_task_defs
    from mtdnn.training.trainer import fit

    with pytest.raises(Reached):
        fit(TrainConfig(task_defs=GLUE, tasks=["rte"], data_dir=str(data_dir), encoder=tiny_encoder,
                        output_dir=str(tmp_path / "run"), limit_train_examples=8))
    rte = load_task_defs(GLUE)["rte"]
    with pytest.raises(Reached):
        train_variant(rte, "full", 1, data_dir, tmp_path / "partial", Recipe(encoder=tiny_encoder, max_epochs=1))
    assert [p.config.tasks for p in reached] == [["rte"], ["rte"]]
    assert all(p.outputs == pipeline.TRAINING_RUN for p in reached)
    assert not (tmp_path / "run").exists()  # planning creates nothing


def test_transfer_fine_tunes_reach_execute_and_write_nothing(reached, data_dir, tiny_encoder, tokenizer):
    from mtdnn.evaluation.transfer import SETTINGS, Encoder, fine_tune
    from mtdnn.tasks.tokenized import tokenized_split
    from mtdnn.tasks.taskdef import load_task_defs

    snli = load_task_defs(GLUE)["snli"]
    subset = tokenized_split(snli, "train", data_dir, tokenizer).head(10)
    with pytest.raises(Reached):
        fine_tune(Encoder("tiny", tiny_encoder, "huggingface", tiny_encoder), snli, subset, tokenizer, SETTINGS, seed=3)
    (plan,) = reached
    assert plan.outputs == pipeline.FINE_TUNE_ONLY and plan.run_dir is None and plan.document is None
    assert (plan.config.seed, plan.config.max_epochs, plan.config.batch_size) == (3, SETTINGS.max_epochs, 8)


def test_transfer_records_keep_the_settings_key_written_before(tmp_path):
    """The sweep finds a record by its key; the settings part is what asdict() of the earlier dataclass gave."""
    from mtdnn.evaluation.transfer import SETTINGS

    before = json.loads((ROOT / "tests" / "fixtures" / "transfer-settings-key-fb14057.json").read_text())
    assert SETTINGS.record() == before
    with pytest.raises(Exception, match="field 'lr'"):  # validated by TrainConfig itself
        type(SETTINGS)(train={"lr": 2.0})


def test_an_unfinished_run_directory_is_refused_without_resume_or_overwrite(tmp_path, data_dir, tiny_encoder,
                                                                           monkeypatch, capsys):
    from mtdnn.train import main

    run = tmp_path / "run"
    args = [GLUE, "--tasks", "rte", "--data-dir", str(data_dir), "--encoder", tiny_encoder, "--accelerator", "cpu",
            "--batch-size", "8", "--limit-train-examples", "32", "--limit-eval-examples", "16", "--max-epochs", "1",
            "--output-dir", str(run)]
    monkeypatch.setenv("MTDNN_FAULT_AT_STEP", "2")
    with pytest.raises(SystemExit) as stopped:
        run_cli(main, args)
    monkeypatch.delenv("MTDNN_FAULT_AT_STEP")
    assert stopped.value.code == 143
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        run_cli(main, args)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "interrupted run" in err and "--resume" in err and "--overwrite" in err
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # never emptied
    assert main([*args, "--overwrite"]) == 0 and (run / "metrics.json").is_file()


def test_print_config_prints_the_resolved_config_and_writes_nothing(tmp_path, monkeypatch, capsys, data_dir):
    from mtdnn.train import main

    monkeypatch.chdir(tmp_path)
    assert main([GLUE, "--tasks", "rte,stsb", "--lr", "3e-5", "--data-dir", str(data_dir), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    config = TrainConfig(**printed)
    assert config.lr == 3e-5 and config.tasks == ["rte", "stsb"] and config.output_dir == "runs/glue-rte-stsb-seed42"
    assert list(printed) == list(TrainConfig.model_fields)  # flat, one key per field
    assert not any(tmp_path.iterdir())


def test_every_setting_is_declared_once_with_its_help_and_range():
    from mtdnn.distillation.specs import FinetuneSpec
    from mtdnn.distillation.student import StudentTrainSpec
    from mtdnn.evaluation.diagnostics.partial_input import Recipe

    for name, field in TrainConfig.model_fields.items():
        assert field.description, f"TrainConfig.{name} has no help text"
    for model in (FinetuneSpec, StudentTrainSpec, Recipe):
        for name, field in model.model_fields.items():
            assert repr(field) == repr(TrainConfig.model_fields[name]), f"{model.__name__}.{name} differs"
    assert "temperature" in StudentTrainSpec.model_fields and "sampling_temperature" not in StudentTrainSpec.model_fields
    assert {"accelerator", "devices", "trust_remote_code", "output_dir"}.isdisjoint(FinetuneSpec.model_fields)
