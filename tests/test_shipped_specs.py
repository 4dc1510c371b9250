"""The specs shipped in teachers/ and students/ validate, name tasks their task definitions hold, and every student's
distill tasks are covered by the shipped teacher spec that writes its teacher directory."""

from pathlib import Path

import pytest

from mtdnn.distillation.student import StudentSpec, student_tasks
from mtdnn.distillation.specs import TeacherSpec, load_spec
from mtdnn.distillation.teachers import teacher_tasks

ROOT = Path(__file__).resolve().parents[1]
TEACHER_SPECS = sorted((ROOT / "teachers").glob("*.yaml"))
STUDENT_SPECS = sorted((ROOT / "students").glob("*.yaml"))


def test_specs_are_shipped():
    assert TEACHER_SPECS and STUDENT_SPECS


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
