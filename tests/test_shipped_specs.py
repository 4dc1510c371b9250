"""The specs shipped in task_defs/, teachers/ and students/ validate, name tasks their task definitions hold, every
student's distill tasks are covered by the shipped teacher spec that writes its teacher directory, and a task
definition copied into a combined file (token-glue.yaml, nli.yaml) equals its original but for the head."""

from pathlib import Path

import pytest
import yaml

from mtdnn.distillation.student import StudentSpec, student_tasks
from mtdnn.distillation.specs import TeacherSpec, load_spec
from mtdnn.distillation.teachers import teacher_tasks
from mtdnn.tasks.taskdef import load_task_defs

ROOT = Path(__file__).resolve().parents[1]
TEACHER_SPECS = sorted((ROOT / "teachers").glob("*.yaml"))
STUDENT_SPECS = sorted((ROOT / "students").glob("*.yaml"))
TASK_DEFS = sorted((ROOT / "task_defs").glob("*.yaml"))
# token-glue.yaml (issue 18's multi-task run) copies each task from its home file
COPIED_FROM = {"conll2003": "ner.yaml", "squad": "squad.yaml", "rte": "glue.yaml", "mrpc": "glue.yaml",
               "stsb": "glue.yaml", "cola": "glue.yaml"}


def test_specs_are_shipped():
    assert TEACHER_SPECS and STUDENT_SPECS and TASK_DEFS


@pytest.mark.parametrize("path", TASK_DEFS, ids=lambda p: p.name)
def test_task_defs_validate(path):
    assert load_task_defs(path)  # raises ConfigError naming the file, task and field


def _without_head(definition: dict) -> dict:
    return {k: v for k, v in definition.items() if k != "head"}


@pytest.mark.parametrize("combined_file, copied_from", [
    ("token-glue.yaml", COPIED_FROM),
    ("nli.yaml", {name: "glue.yaml" for name in ("rte", "mrpc", "stsb", "cola")}),
])
def test_copied_task_definitions_equal_their_originals_but_for_the_head(combined_file, copied_from):
    """token-glue.yaml (issue 18's run) and nli.yaml (the transfer and distillation experiments) copy their GLUE
    tasks from glue.yaml, and keep the linear head those experiments were measured with where glue.yaml now puts
    SAN on pair classification (issue 26): every other field is the original's."""
    combined = yaml.safe_load((ROOT / "task_defs" / combined_file).read_text(encoding="utf-8"))["tasks"]
    assert set(copied_from) <= set(combined)
    for name, home in copied_from.items():
        original = yaml.safe_load((ROOT / "task_defs" / home).read_text(encoding="utf-8"))["tasks"][name]
        assert _without_head(combined[name]) == _without_head(original), f"{combined_file}'s {name} differs from {home}'s"
        assert "head" not in combined[name], f"{combined_file}'s {name}: the linear head it was measured with"


@pytest.mark.parametrize("path", TEACHER_SPECS, ids=lambda p: p.name)
def test_teacher_spec_validates(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # spec paths are relative to the working directory (the repository root)
    spec = load_spec(path, TeacherSpec, "teacher")
    tasks = teacher_tasks(spec, str(path))  # raises for an unknown task or one without train and dev splits
    assert list(tasks) == spec.tasks
    assert all("train" in t.splits and "dev" in t.splits for t in tasks.values())


@pytest.mark.parametrize("path", STUDENT_SPECS, ids=lambda p: p.name)
def test_student_spec_validates_and_is_covered(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = load_spec(path, StudentSpec, "student")
    writers = [s for s in (load_spec(p, TeacherSpec, "teacher") for p in TEACHER_SPECS)
               if Path(s.output_dir) == Path(spec.teachers or "")]
    assert writers or not spec.distill, f"{path.name}: no shipped teacher spec writes {spec.teachers}"
    tasks = student_tasks(spec, str(path), writers[0].tasks if writers else None)  # raises if a task is uncovered
    assert list(tasks) == spec.distill + spec.gold
    for name, weight in spec.loss_weights.items():
        assert tasks[name].loss_weight == weight
