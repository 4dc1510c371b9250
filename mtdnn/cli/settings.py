"""Command-line flags generated from :class:`~mtdnn.training.config.TrainConfig`, the one schema of a training run.

Each field gives its flag (``--warmup-ratio`` for ``warmup_ratio``), help text (the field's ``description``),
default, ``--help`` group and type: an int above 0 is a positive int, a float's range its interval, a ``Literal`` its
choices, a bool a switch (``--no-...`` too when it defaults to true); a field's ``cli`` hints name the few types
its annotation cannot say (comma-separated names, bucket lengths, ``--devices``). Bad values are refused by
argparse (exit code 2, naming the flag) or, for ranges argparse leaves to it, by ``TrainConfig`` itself.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any

import annotated_types

from ..training.config import LIGHTNING, LOGGERS, TrainConfig
from .common import devices, float_in, max_length_int, name_list, positive_int

LATE = "late"
"""The group of fields listed at the top level after the groups of training settings (``--deterministic``)."""


def logger_list(text: str) -> list[str]:
    """``--loggers``: comma-separated names of :data:`~mtdnn.training.config.LOGGERS`."""
    names = name_list(text)
    bad = [n for n in names if n not in LOGGERS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown logger {bad[0]!r} (choose from {', '.join(LOGGERS)})")
    return names


def bucket_list(text: str) -> list[int]:
    """``--length-buckets``: ascending positive lengths (:func:`mtdnn.training.speed.parse_buckets`)."""
    # keeps torch out of import time
    from ..training.speed import parse_buckets

    try:
        return parse_buckets(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


NAMED_TYPES = {"names": name_list, "loggers": logger_list, "buckets": bucket_list, "devices": devices,
               "max_length": max_length_int, "int": int}


def _bare(annotation: Any) -> Any:
    """``int | None`` -> ``int``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType"))\
        and len(args) == 1 else annotation


def _float_type(metadata: list):
    low, high, low_open, high_open = 0.0, float("inf"), False, True
    found = False
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            low, low_open, found = float(item.gt), True, True
        elif isinstance(item, annotated_types.Ge):
            low, low_open, found = float(item.ge), False, True
        elif isinstance(item, annotated_types.Lt):
            high, high_open = float(item.lt), True
        elif isinstance(item, annotated_types.Le):
            high, high_open = float(item.le), False
    return float_in(low, high, low_open=low_open, high_open=high_open) if found else float


def flag_arguments(name: str, default: Any = argparse.SUPPRESS) -> tuple[list[str], dict]:
    """The ``add_argument`` flags and keyword arguments of field ``name`` (``default``: the flag's value when
    absent; ``SUPPRESS`` leaves it out of the namespace, so given flags can be told from defaults)."""
    field = TrainConfig.model_fields[name]
    cli = (field.json_schema_extra or {}).get("cli", {})
    help_text = field.description or ""
    if field.default is not None and not isinstance(field.default, bool):
        help_text += f" (default: {field.default})"
    kwargs: dict[str, Any] = {"help": help_text, "default": default}
    if cli.get("metavar"):
        kwargs["metavar"] = cli["metavar"]
    kind, annotation = cli.get("type"), _bare(field.annotation)
    flags = ["--" + name.replace("_", "-")]
    if kind in NAMED_TYPES:
        kwargs["type"] = NAMED_TYPES[kind]
    elif kind and kind.startswith("optional:"):
        kwargs.update(nargs="?", const=kind.split(":", 1)[1])
    elif annotation is bool:
        if field.default is True:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(action="store_const", const=True)
    elif typing.get_origin(annotation) is typing.Literal:
        kwargs["choices"] = list(typing.get_args(annotation))
    elif annotation is int:
        positive = any(isinstance(m, annotated_types.Gt) and m.gt == 0 for m in field.metadata)
        kwargs["type"] = positive_int if positive else int
    elif annotation is float:
        kwargs["type"] = _float_type(field.metadata)
    return flags, kwargs


def group_of(name: str) -> str | None:
    """The ``--help`` group of field ``name`` (None: the top level)."""
    return ((TrainConfig.model_fields[name].json_schema_extra or {}).get("cli", {}) or {}).get("group")


def add_settings(parser: argparse.ArgumentParser, names: list[str], defaults: dict | None = None,
                 groups: dict | None = None) -> None:
    """Add the flags of the fields ``names`` in that order, each in its group.

    Args:
        defaults: a flag's value when absent, by field (default: ``argparse.SUPPRESS`` when the parser's
            ``argument_default`` is, else the field's default).
        groups: the argument groups made so far, by title (shared between calls).
    """
    groups = {} if groups is None else groups
    for name in names:
        title = group_of(name)
        target = parser
        if title not in (None, LATE):
            if title not in groups:
                groups[title] = parser.add_argument_group(title)
            target = groups[title]
        if defaults is not None and name in defaults:
            default = defaults[name]
        elif parser.argument_default is argparse.SUPPRESS:
            default = argparse.SUPPRESS
        else:
            default = TrainConfig.model_fields[name].default
        flags, kwargs = flag_arguments(name, default)
        target.add_argument(*flags, **kwargs)


def flag_fields() -> list[str]:
    """The fields that have a flag, in schema order."""
    return [n for n, f in TrainConfig.model_fields.items()
            if ((f.json_schema_extra or {}).get("cli", {}) or {}).get("flag", True)]


def lightning_fields() -> list[str]:
    """The Lightning Trainer fields (engineering: accelerator, devices, ...), the flags several commands share."""
    return [n for n in flag_fields() if group_of(n) == LIGHTNING]


def add_trainer_args(parser: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    """The Lightning Trainer flags shared by the training commands (engineering, not research), from the schema.

    Args:
        defaults: the value of each flag when it is not given (default: the field's); ``argparse.SUPPRESS``
            leaves unset flags out of the parsed namespace (``mtdnn.train`` tells given flags from defaults so).
    """
    add_settings(parser, lightning_fields(), defaults={n: TrainConfig.model_fields[n].default for n in
                                                       lightning_fields()} | (defaults or {}))


def lightning_settings(args: argparse.Namespace) -> dict:
    """The :class:`~mtdnn.training.config.TrainConfig` fields of :func:`add_trainer_args`'s flags."""
    return {name: getattr(args, name) for name in lightning_fields()}
