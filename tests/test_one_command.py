"""``mtdnn <command>`` and ``python -m mtdnn <command>`` (issue 27 part 2): one command in front of the seven, with
``--version``; the callable command modules carry the API functions' signatures and docstrings."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mtdnn.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
NO_HEAVY = ("import runpy, sys\nsys.argv = ['mtdnn', *sys.argv[1:]]\ntry:\n    runpy.run_module('mtdnn', "
            "run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pytorch_lightning', "
            "'transformers', 'datasets'))\nassert not heavy, heavy[:5]\n")


def test_every_command_is_listed_and_each_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["mtdnn"] == "mtdnn.cli.main:cli"
    assert {f"mtdnn-{name}" for name in COMMANDS} <= set(scripts)
    done = subprocess.run([sys.executable, "-m", "mtdnn", "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0
    for name in COMMANDS:
        assert f"\n  {name} " in done.stdout, name


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mtdnn {importlib.metadata.version('mtdnn')}"
    import mtdnn

    assert mtdnn.__version__ == importlib.metadata.version("mtdnn")
    assert 'version = "' in (ROOT / "pyproject.toml").read_text()  # written there, and only there
    assert "0.1" not in (ROOT / "mtdnn" / "__init__.py").read_text()  # no second copy of the number


def test_a_command_runs_with_its_own_flags_and_an_unknown_one_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0 and "python -m mtdnn.train" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2 and "give a command: train, evaluate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["trian"])
    assert exit_info.value.code == 2 and "invalid choice: 'trian'" in capsys.readouterr().err
    # the command's exit code comes back: a refused input is 2 through `mtdnn train` as through python -m
    done = subprocess.run([sys.executable, "-m", "mtdnn", "train", str(ROOT / "task_defs" / "glue.yaml"), "--tasks",
                           "nosuch"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "no task named nosuch" in done.stderr


def test_help_of_the_one_command_and_of_each_command_imports_no_torch():
    for args in (["--help"], *([name, "--help"] for name in COMMANDS)):
        done = subprocess.run([sys.executable, "-c", NO_HEAVY, *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=120)
        assert done.returncode == 0, f"mtdnn {' '.join(args)}: {done.stderr[-2000:]}"


def test_callable_command_modules_show_the_api_signature_and_docstring():
    import mtdnn
    from mtdnn import api

    for name in ("distill", "transfer"):
        importlib.import_module(f"mtdnn.{name}")  # the python -m module first: the attribute is the module
        command = getattr(mtdnn, name)
        assert inspect.ismodule(command)
        function = getattr(api, name)
        assert inspect.signature(command) == inspect.signature(function)
        assert command.__doc__ == function.__doc__ and "(*args, **kwargs)" not in str(inspect.signature(command))
