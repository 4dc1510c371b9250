"""The file helpers of mtdnn.fileio (one per kind of file) and a scan that every module of mtdnn/ uses them."""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path

import pytest
import torch

from mtdnn.errors import CheckpointError, ConfigError, UserError
from mtdnn.fileio import (dump_yaml, parse_yaml, prepare_output_dir, prepare_output_path, read_checkpoint,
                          read_json, read_safetensors, read_yaml, write_atomic)

PACKAGE = Path(__file__).resolve().parents[1] / "mtdnn"


# ------------------------------------------------------------------------------------------------------- YAML


def test_repeated_key_is_refused_with_both_lines(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  rte:\n    type: classification\n  rte:\n    type: regression\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    message = str(err.value)
    assert str(path) in message and "'rte' is repeated" in message
    assert "first on line 2" in message and "again on line 4" in message


def test_repeated_key_is_refused_at_any_depth():
    with pytest.raises(ConfigError, match=r"'path' is repeated \(first on line 3, again on line 4\)"):
        parse_yaml("a:\n  b:\n    path: x\n    path: y\n", "f.yaml")


def test_anchor_and_alias_are_refused_with_the_line():
    laughs = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    with pytest.raises(ConfigError, match=r"f.yaml: line 1: anchor &a is not allowed"):
        parse_yaml(laughs, "f.yaml")
    with pytest.raises(ConfigError, match=r"f.yaml: line 2: alias \*x is not allowed"):
        parse_yaml("a: 1\nb: *x\n", "f.yaml")


def test_plain_yaml_parses_and_dump_yaml_round_trips_shared_values():
    shared = [1, 2]
    doc = {"a": shared, "b": shared, "c": {"d": 5e-5, "e": None}}
    text = dump_yaml(doc)
    assert "&" not in text and "*" not in text  # a value used twice is written twice, never as an alias
    assert parse_yaml(text, "mem") == doc


def test_read_yaml_names_the_file_for_missing_and_binary_files(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml: cannot read the task definitions"):
        read_yaml(tmp_path / "missing.yaml", what="task definitions")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match="binary.yaml: cannot read"):
        read_yaml(binary, CheckpointError)


# ------------------------------------------------------------------------------------------- JSON and tensors


def test_read_json_damaged_names_file_and_line(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text('{\n  "a": 1,\n  "b": \n')
    with pytest.raises(CheckpointError, match=r"meta.json: line \d+: the JSON file is damaged"):
        read_json(path)


def test_truncated_safetensors_and_checkpoint_are_checkpoint_errors(tmp_path):
    from safetensors.torch import save_file

    weights = tmp_path / "heads.safetensors"
    save_file({"w": torch.ones(64, 64)}, str(weights))
    assert read_safetensors(weights)["w"].shape == (64, 64)
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="heads.safetensors: cannot read the weights"):
        read_safetensors(weights)

    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(64, 64)}}, ckpt)
    assert read_checkpoint(ckpt)["state_dict"]["w"].shape == (64, 64)
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="last.ckpt: cannot read the checkpoint"):
        read_checkpoint(ckpt)


def test_checkpoint_with_code_is_refused(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"args": argparse.Namespace(lr=1.0)}, path)  # an arbitrary class: refused by weights_only=True
    with pytest.raises(CheckpointError, match="evil.ckpt"):
        read_checkpoint(path)


# ------------------------------------------------------------------------------------------------------ output


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write in: read-only for a normal user; /sys for root (which ignores
    permissions), skipped where even that is writable."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir()
        path.chmod(0o555)
        return path
    probe = Path("/sys")
    try:
        (probe / "mtdnn-probe").mkdir()
    except OSError:
        return probe
    (probe / "mtdnn-probe").rmdir()
    pytest.skip("no unwritable directory available to root here")


def test_prepare_output_refuses_unwritable_locations_and_creates_nothing(tmp_path):
    locked = unwritable_dir(tmp_path)
    with pytest.raises(UserError, match=r"--output-dir: .*run: cannot write in"):
        prepare_output_dir(locked / "runs" / "run", "--output-dir")
    with pytest.raises(UserError, match=r"--output: .*out.json: cannot write in"):
        prepare_output_path(locked / "out.json", "--output")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UserError, match="is not a directory"):
        prepare_output_dir(a_file / "run", "--output-dir")
    with pytest.raises(UserError, match="exists and is not a directory"):
        prepare_output_dir(a_file, "--output-dir")
    with pytest.raises(UserError, match="is a directory"):
        prepare_output_path(tmp_path, "--output")
    new = tmp_path / "new" / "deeper" / "run"
    assert prepare_output_dir(new) == new and not (tmp_path / "new").exists()  # a check, nothing created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] + (["read-only"] if locked.parent == tmp_path
                                                                     else [])


def test_write_atomic_failure_is_a_user_error_naming_the_file(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UserError, match="file/out.txt"):
        write_atomic(a_file / "out.txt", "text")


# -------------------------------------------------------------------------------------------- no bypassing


FORBIDDEN_CALLS = {
    ("yaml", "safe_load"): "fileio.read_yaml", ("yaml", "load"): "fileio.read_yaml",
    ("yaml", "full_load"): "fileio.read_yaml", ("yaml", "unsafe_load"): "fileio.read_yaml",
    ("yaml", "safe_dump"): "fileio.dump_yaml", ("yaml", "dump"): "fileio.dump_yaml",
    ("torch", "load"): "fileio.read_checkpoint", ("json", "load"): "fileio.read_json",
}
# json.loads of data rows and user input (with line numbers) is parsing data, not reading a toolkit file
JSON_LOADS_ALLOWED = {"tasks/reading.py", "tasks/tokenized.py", "tasktypes/spans/squad.py", "evaluation/predict.py", "evaluation/token_predict.py"}


def bypasses(source: str, rel: str) -> list[str]:
    """Places in one module (``source``, named ``rel``) that read or write files without mtdnn.fileio."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("safetensors"):
            if any(a.name in ("load_file", "load", "safe_open") for a in node.names):
                found.append(f"{rel}:{node.lineno}: safetensors read (use fileio.read_safetensors)")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            helper = FORBIDDEN_CALLS.get((func.value.id, func.attr))
            if helper:
                found.append(f"{rel}:{node.lineno}: {func.value.id}.{func.attr} (use {helper})")
            if (func.value.id, func.attr) == ("json", "loads") and rel not in JSON_LOADS_ALLOWED:
                found.append(f"{rel}:{node.lineno}: json.loads (use fileio.read_json)")
        if isinstance(func, ast.Attribute) and func.attr in ("write_text", "write_bytes", "mkdir"):
            found.append(f"{rel}:{node.lineno}: .{func.attr}() (use fileio.write_atomic / make_dir)")
        is_open = (isinstance(func, ast.Name) and func.id == "open") or (
            isinstance(func, ast.Attribute) and func.attr == "open" and not isinstance(func.value, ast.Name))
        if is_open:
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 None)
            if isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+"):
                found.append(f"{rel}:{node.lineno}: open(..., {mode.value!r}) (use fileio.write_atomic)")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def test_no_module_bypasses_the_file_helpers():
    modules = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "fileio"]
    assert len(modules) > 20
    found = [line for p in sorted(modules)
             for line in bypasses(p.read_text(encoding="utf-8"), p.relative_to(PACKAGE).as_posix())]
    # the one deliberate exception: Lightning's checkpoint I/O writes through a temporary file itself
    found = [f for f in found if not f.startswith("training/runs.py") or "open(..., 'wb')" not in f]
    assert found == [], "\n".join(found)


def test_the_scan_catches_a_bypass():
    found = bypasses("import yaml, torch\nfrom safetensors.torch import load_file\n"
                     "x = yaml.safe_load('a: 1')\ny = torch.load('p')\nopen('f', 'w')\n", "probe.py")
    assert [f.split(": ", 1)[1].split(" ")[0] for f in found] == ["safetensors", "yaml.safe_load", "torch.load",
                                                                  "open(...,"]
