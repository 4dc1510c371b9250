"""The package's skeleton in figures (issue 25's before/after table), read from the source with ``ast``.

    python bench/structure.py [PACKAGE_DIR ...] [--json OUT]     # default: mtdnn/ of this checkout

For each package directory (e.g. ``mtdnn`` of this checkout and of a worktree of an earlier commit): Python files
and lines, the longest file, files over 400 lines, function-level imports (an ``import`` inside a function), the
sites that construct ``pl.Trainer``, the classes that declare training settings (class-level annotations named as
``TrainConfig`` fields: ``lr``, ``max_epochs``, ...; ``TrainConfig`` itself counts), and comparisons of a task's
``.type`` with a string (``task.type == "classification"``, ``.type in ("ranking", ...)``).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

SETTING_NAMES = {"max_epochs", "lr", "batch_size", "eval_batch_size", "weight_decay", "warmup_ratio",
                 "gradient_clip", "max_length", "seed", "epochs", "limit_train_examples", "dropout"}
"""Field names of training settings (``epochs``: transfer's name for ``max_epochs`` before the schema was one)."""


def _is_str_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and bool(node.elts) and \
        all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)


def measure(package: Path) -> dict:
    files = sorted(package.rglob("*.py"))
    lines = {str(f.relative_to(package.parent)): len(f.read_text(encoding="utf-8").splitlines()) for f in files}
    function_imports = trainer_sites = type_branches = 0
    setting_classes = []
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        function_imports += _function_imports(tree)  # each counted once, however deeply its function is nested
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                trainer_sites += name == "Trainer"
            elif isinstance(node, ast.Compare):
                left = node.left
                if isinstance(left, ast.Attribute) and left.attr == "type" and \
                        any(_is_str_constant(c) for c in node.comparators):
                    type_branches += 1
            elif isinstance(node, ast.ClassDef):
                names = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and
                         isinstance(s.target, ast.Name)}
                if len(names & SETTING_NAMES) >= 2:
                    setting_classes.append(f"{f.relative_to(package.parent)}:{node.name}")
    longest = max(lines, key=lines.get)
    return {"package": str(package), "files": len(files), "lines": sum(lines.values()),
            "longest_file": longest, "longest_lines": lines[longest],
            "files_over_400": sorted(k for k, v in lines.items() if v > 400),
            "function_level_imports": function_imports, "pl_trainer_sites": trainer_sites,
            "setting_declarations": setting_classes, "task_type_branches": type_branches}


def _function_imports(tree: ast.AST) -> int:
    count = 0

    def visit(node: ast.AST, inside: bool) -> None:
        nonlocal count
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                count += 1
            visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", default=[str(Path(__file__).resolve().parents[1] / "mtdnn")])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = [measure(Path(p)) for p in args.packages]
    rows = [("files", "files"), ("lines", "lines"), ("longest file", "longest_file"),
            ("its lines", "longest_lines"), ("files over 400 lines", "files_over_400"),
            ("function-level imports", "function_level_imports"), ("pl.Trainer construction sites", "pl_trainer_sites"),
            ("classes declaring training settings", "setting_declarations"),
            ("`.type ==` / `.type in` branches", "task_type_branches")]
    print("| | " + " | ".join(r["package"] for r in results) + " |")
    print("|---|" + "---:|" * len(results))
    for label, key in rows:
        cells = [len(r[key]) if isinstance(r[key], list) else r[key] for r in results]
        print(f"| {label} | " + " | ".join(str(c) for c in cells) + " |")
    for r in results:
        print(f"{r['package']}: over 400 lines: {', '.join(r['files_over_400']) or 'none'}; settings declared in: "
              f"{', '.join(r['setting_declarations'])}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
