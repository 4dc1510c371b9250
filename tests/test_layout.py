"""The layout is the pipeline: a lower stage never imports a higher one (read from the source with ast)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mtdnn"
# errors/fileio < tasks < modeling < tasktypes < training < distillation, evaluation < api, cli, the entry points
# (tasks: the type-agnostic layer; tasktypes: one class per task type, above modeling because heads and losses are
# modeling code, and below training, which runs them)
STAGES = {"errors": 0, "fileio": 0, "tasks": 1, "modeling": 2, "tasktypes": 3, "training": 4, "distillation": 5,
          "evaluation": 5, "api": 6, "cli": 6}


def stage_of(module: str) -> tuple[str, int]:
    """``mtdnn.training.trainer`` -> ("training", 4); the entry points ``mtdnn.train`` etc. are on top."""
    parts = module.split(".")
    if len(parts) == 1:
        return "mtdnn", 7
    return parts[1], STAGES.get(parts[1], 6)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every ``mtdnn`` module imported by the file (also inside functions), with its line."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            found += [(n, node.lineno) for n in names if n.startswith("mtdnn")]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("mtdnn")]
    return found


def test_import_resolution_sees_relative_and_nested_imports():
    trainer = PACKAGE / "training" / "trainer.py"
    names = {n for n, _ in imports_of(trainer)}
    assert "mtdnn.tasks.taskdef" in names and "mtdnn.training.module" in names  # top-level and in a function


def test_no_stage_imports_a_higher_one():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        name, level = stage_of(module)
        for target, line in imports_of(path):
            target_name, target_level = stage_of(target)
            peers = target_level == level == 5 and target_name != name  # distillation and evaluation: apart
            if target_level > level or peers:
                violations.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name} imports {target}")
    assert not violations, "\n".join(violations)
