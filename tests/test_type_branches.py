"""No code outside the task-type packages branches on a task's type by name, by class or by ``isinstance``: it asks
the type (``task.kind``) instead. Read from the source with ast."""

import ast
import inspect
from pathlib import Path

from mtdnn.tasks import types

PACKAGE = Path(__file__).resolve().parents[1] / "mtdnn"
TYPE_PACKAGES = ("tasktypes",)  # mtdnn/tasktypes/: the one place a type's own name and class appear
TYPE_ATTRIBUTES = ("type", "type_name")
TYPE_CLASSES = {cls.__name__ for kind in types.TASK_TYPES.values() for cls in inspect.getmro(type(kind))
                if cls not in (object,) and cls.__module__.startswith("mtdnn.")}
TYPE_NAMES = set(types.TASK_TYPES)

ALLOWED: dict[str, str] = {}  # every branch outside mtdnn/tasktypes now asks the type


def _is_type_attribute(node: ast.AST) -> bool:
    """``x.type`` or ``x.type_name``, but not ``x.head.type`` (a head's type) or ``device.type``."""
    if not (isinstance(node, ast.Attribute) and node.attr in TYPE_ATTRIBUTES):
        return False
    base = node.value
    if isinstance(base, ast.Attribute) and base.attr == "head":
        return False
    return not (isinstance(base, ast.Name) and base.id in ("device",))


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a constant or of a tuple, list or set of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _names_a_type_class(node: ast.AST) -> bool:
    names = node.elts if isinstance(node, ast.Tuple) else [node]
    return any(isinstance(n, (ast.Name, ast.Attribute)) and (getattr(n, "id", None) or getattr(n, "attr", None))
               in TYPE_CLASSES for n in names)


def branches_on_type(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every comparison of a ``.type``/``.type_name`` with a task type's name (a string constant,
    or an ``in`` of strings, naming a registered type; ``head.type == "san"`` names a head), every ``isinstance(x, <a type class>)`` and every ``type(x) is <a type class>`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = {s for o in operands for s in _strings(o)}
            if any(_is_type_attribute(o) for o in operands) and named & TYPE_NAMES:
                found.append((node.lineno, "compares a task's type with its name"))
            is_type_call = any(isinstance(o, ast.Call) and isinstance(o.func, ast.Name) and o.func.id == "type"
                               for o in operands)
            if is_type_call and any(_names_a_type_class(o) for o in operands):
                found.append((node.lineno, "type(x) compared with a task-type class"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance",
              "issubclass") and len(node.args) == 2 and _names_a_type_class(node.args[1])):
            found.append((node.lineno, f"{node.func.id}(x, <a task-type class>)"))
    return found


def test_the_scan_sees_each_kind_of_branch():
    source = '''
if task.type == "ranking": pass
if task.type in ("classification", "regression"): pass
if "mlm" != t.type_name: pass
if isinstance(kind, Classification): pass
if type(kind) is SpanExtraction: pass
if task.head.type == "san": pass
if self.type != "san": pass
if device.type == "cuda": pass
if old.type != task.type: pass
'''
    assert [line for line, _ in branches_on_type(source)] == [2, 3, 4, 5, 6]


def test_no_code_outside_the_type_packages_branches_on_a_task_type():
    assert {"Classification", "SentenceType", "SpanExtraction", "TaskKind"} <= TYPE_CLASSES and TYPE_NAMES
    violations, seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if relative.parts[1] in TYPE_PACKAGES:
            continue
        for line, what in branches_on_type(path.read_text(encoding="utf-8")):
            where = f"{relative.as_posix()}:{line}"
            if where in ALLOWED:
                seen.add(where)
                continue
            violations.append(f"{where}: {what}; ask the type (task.kind) instead")
    assert not violations, "\n".join(violations)
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"allow-list entries without a branch there (remove them): {stale}"
