"""The specs shipped in task_defs/, teachers/ and students/ validate, name tasks their task definitions hold, every
student's distill tasks are covered by the shipped teacher spec that writes its teacher directory, and a task
definition copied into a combined file (token-glue.yaml) equals its original."""

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


def test_token_glue_copies_equal_their_originals():
    combined = yaml.safe_load((ROOT / "task_defs" / "token-glue.yaml").read_text(encoding="utf-8"))["tasks"]
    assert list(combined) == list(COPIED_FROM)
    for name, home in COPIED_FROM.items():
        original = yaml.safe_load((ROOT / "task_defs" / home).read_text(encoding="utf-8"))["tasks"][name]
        assert combined[name] == original, f"token-glue.yaml's {name} differs from {home}'s"


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
