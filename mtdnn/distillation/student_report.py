"""The student's ``report.json`` and ``report.md``: per task each teacher member's dev score, their mean and
standard deviation, the ensemble's and the student's score, and the same averaged over tasks."""

from __future__ import annotations

from pathlib import Path

from ..modeling.metrics import average_score
from ..tables import markdown_table
from ..tasks.taskdef import TaskDef
from .student_spec import StudentSpec
from .teacher_report import render_markdown


def student_report(teacher_report: dict | None, best: dict, distill: list[str], gold: list[str],
                   tasks: dict[str, TaskDef], run_dir: Path, spec: StudentSpec) -> dict:
    """The teachers' report (:func:`mtdnn.teachers.summarize`) with the student's best-epoch dev scores added:
    per distill task and on their average; gold-only tasks listed apart."""

    def scores(name: str) -> dict:
        return {"dev": best["tasks"][name], "score": best["tasks"][name][tasks[name].metric_names[0]]}

    report = dict(teacher_report or {"tasks": {}, "average": {}})
    report["tasks"] = {n: {**report["tasks"][n], "student": scores(n)} for n in distill}
    report["average"] = dict(report["average"])
    if distill:
        report["average"]["student"] = average_score({n: best["tasks"][n] for n in distill},
                                                     {n: tasks[n].metric_names for n in distill})
    report["gold_tasks"] = {n: {"metric": tasks[n].metric_names[0], "student": scores(n)} for n in gold}
    report["student"] = {"run": str(run_dir), "best_epoch": best["epoch"], "average_all_tasks": best["average"],
                         "temperature": spec.temperature, "alpha": spec.alpha, "init": spec.init.model_dump()}
    return report


def render_report(report: dict, title: str) -> str:
    if report["tasks"]:
        return render_markdown(report, title)
    rows = [[f"{n} (gold only)", t["metric"], f"{t['student']['score']:.4f}"] for n, t in report["gold_tasks"].items()]
    return "\n".join([f"# {title}", "", *markdown_table(["task", "metric", "student"], rows)]) + "\n"
