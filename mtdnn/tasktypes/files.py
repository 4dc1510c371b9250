"""What the task types that read whole files (``conll``, ``squad``) share: the rule that every file split is in
the type's format and no split comes from the hub."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tasks.taskdef import TaskDef


def check_formats(task: TaskDef, fmt: str) -> None:
    """Every file split of ``task`` in format ``fmt``, none from the hub, article carves only for squad files;
    raises ValueError naming the split."""
    for name, spec in task.splits.items():
        if spec.path is not None and spec.format != fmt:
            raise ValueError(f"split '{name}': a {task.type} task reads files in the '{fmt}' format "
                             f"(format: {spec.format})")
        if spec.hub is not None:
            raise ValueError(f"split '{name}': hub splits are not supported for {task.type} tasks")
        if spec.carve is not None and spec.carve.by == "article" and fmt != "squad":
            raise ValueError(f"split '{name}': carve by article is for squad files only")
