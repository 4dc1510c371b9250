"""Out-of-fold teachers (``cross_fit: K`` in a teacher spec): the task definitions of each fold.

With K folds of the training set (seeded, stratified by label; :func:`mtdnn.tasks.subsets.fold_assignment`), the
members of fold k are fine-tuned on the other K - 1 folds and run over fold k, so every training example's soft
target comes from teachers that never trained on it: out-of-fold predictions, as in stacked generalisation
(Wolpert 1992, "Stacked generalization", Neural Networks 5(2)). A fold is expressed as task definitions (the
``folds`` split source of :mod:`mtdnn.tasks.taskdef`), so the members train with the normal trainer and their
data is cached and fingerprinted like any split.
"""

from __future__ import annotations

from pathlib import Path

from ..tasks.taskdef import TaskDef, parse_tasks

FOLD_SPLIT = "heldout"  # in a fold's task definitions: the training rows of fold k, which its members do not see
FULL_TRAIN = "train_full"


def fold_task(task: TaskDef, k: int, fold: int, seed: int) -> TaskDef:
    """The task as the members of fold ``fold`` (1..k) see it: ``train`` is every training row but the fold's,
    ``heldout`` the fold's rows (their out-of-fold soft targets), ``train_full`` the original training split, and
    the other splits unchanged (a split carved from ``train`` now carves from ``train_full``)."""
    plain = {k: v for k, v in task.to_plain().items() if k != "name"}
    splits = {}
    for name, split in plain["splits"].items():
        for source in ("carve", "folds"):
            if split.get(source, {}).get("from_split") == "train":
                split = {**split, source: {**split[source], "from_split": FULL_TRAIN}}
        splits[FULL_TRAIN if name == "train" else name] = split
    folds = {"from_split": FULL_TRAIN, "k": k, "fold": fold, "seed": seed}
    splits["train"] = {"folds": {**folds, "keep": "out"}}
    splits[FOLD_SPLIT] = {"folds": {**folds, "keep": "in"}}
    return parse_tasks({"tasks": {task.name: {**plain, "splits": splits}}}, f"fold {fold} of task '{task.name}'")[task.name]


def fold_task_defs_path(teacher_dir: Path, task: str, fold: int) -> Path:
    """Where the teacher build writes the task definitions of ``fold`` (see :func:`fold_task_defs`)."""
    return Path(teacher_dir) / task / f"fold-{fold}.yaml"


def fold_task_defs(task: TaskDef) -> dict:
    """A task-definition document holding ``task`` alone (what ``load_task_defs`` reads back)."""
    return {"tasks": {task.name: {k: v for k, v in task.to_plain().items() if k != "name"}}}
