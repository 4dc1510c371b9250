"""Every command's options as data (flags, destination, default, choices, nargs, action kind), for
``tests/test_cli_options.py``: the option sets, not the help text, must stay as they were."""

import argparse
import importlib
import json

COMMANDS = ("train", "evaluate", "predict", "teachers", "distill", "transfer", "diagnose")


def _options(parser: argparse.ArgumentParser) -> list[dict]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in sorted(action.choices.items()):
                out.append({"subcommand": name, "options": _options(sub)})
            continue
        default = action.default
        if default is argparse.SUPPRESS:
            default = "==SUPPRESS=="
        out.append({"flags": list(action.option_strings) or [action.dest], "dest": action.dest,
                    "default": default if isinstance(default, (str, int, float, bool, type(None), list)) else repr(default),
                    "choices": sorted(map(str, action.choices)) if action.choices else None,
                    "nargs": action.nargs, "required": action.required, "action": type(action).__name__,
                    "const": action.const if isinstance(action.const, (str, int, float, bool, type(None))) else repr(action.const)})
    return sorted(out, key=lambda o: json.dumps(o, sort_keys=True))


def option_sets() -> dict:
    return {c: _options(importlib.import_module(f"mtdnn.cli.{c}").build_parser()) for c in COMMANDS}


if __name__ == "__main__":
    print(json.dumps(option_sets(), indent=1, sort_keys=True))
