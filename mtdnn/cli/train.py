"""``python -m mtdnn.train TASK_DEFS [flags]`` or ``--config RUN/config.yaml [flags]``: flags -> TrainConfig -> fit.

Examples::

    python -m mtdnn.train task_defs/glue.yaml --data-dir ../shared/data --tasks rte,mrpc,stsb,cola
    python -m mtdnn.train --config runs/<run>/config.yaml --output-dir runs/<run>-again   # the same run again

Every flag sets the :class:`~mtdnn.training.config.TrainConfig` field of its name. With ``--config`` the file
gives every field, and each flag given beside it overrides one (printed as such).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError, HelpFormatter, RunStopped, run_cli
from ..fileio import dump_yaml
from ..training.config import EVALUATION, LIGHTNING, OPTIMISATION, SPEED, TrainConfig, load_config, validate_config
from ..training.resolve import check_run, resolve_config
from .common import setup_logging
from .settings import LATE, add_settings, flag_fields, group_of

NOT_SETTINGS = ("config", "overwrite", "resume", "print_config")  # what to do with the run directory, not how to train


def build_parser() -> argparse.ArgumentParser:
    """Every flag defaults to ``SUPPRESS``: the parsed namespace holds only the flags given. The training flags
    are generated from :class:`~mtdnn.training.config.TrainConfig` (:mod:`mtdnn.cli.settings`)."""
    S = argparse.SUPPRESS
    p = argparse.ArgumentParser(prog="python -m mtdnn.train", description=__doc__.split("\n\n")[0],
                                argument_default=S, formatter_class=HelpFormatter)
    p.add_argument("task_defs", nargs="?", help=TrainConfig.model_fields["task_defs"].description)
    p.add_argument("--config", metavar="YAML",
                   help="a TrainConfig file, e.g. a run's config.yaml: rerun it; flags given beside it override")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a run directory that holds a run (complete, or interrupted and not resumed)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --output-dir from checkpoints/last.ckpt (same settings)")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config (YAML, as config.yaml holds it without its resolved section) and "
                        "exit: nothing is trained or written")
    fields = flag_fields()
    groups: dict = {}
    for title in (None, OPTIMISATION, EVALUATION, LATE, LIGHTNING, SPEED):
        add_settings(p, [n for n in fields if group_of(n) == title], groups=groups)
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of the parsed flags: ``--config``'s file with the given flags over it, or the
    flags over the defaults. Overrides of a file are printed (stderr).

    Raises:
        ConfigError: no task definitions, or an invalid file or value.
    """
    given = {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS}
    if getattr(args, "config", None):
        config = load_config(args.config)
        if config.trust_remote_code and not given.get("trust_remote_code"):
            raise ConfigError(f"--config {args.config}: field 'trust_remote_code' is true, but a config file cannot "
                              "allow an encoder's own code to run: give --trust-remote-code on this command line")
        changed = {k: v for k, v in given.items() if getattr(config, k) != v}
        for key, value in changed.items():
            print(f"override: --{key.replace('_', '-')} {value} (config {args.config}: {getattr(config, key)})",
                  file=sys.stderr)
        return validate_config({**config.model_dump(), **given}, f"--config {args.config} with flags", flags=True)
    if "task_defs" not in given:
        raise ConfigError("give the task definitions (e.g. task_defs/glue.yaml) or --config RUN/config.yaml")
    return validate_config(given, "command line", flags=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    config = config_from_args(args)
    if getattr(args, "print_config", False):
        print(dump_yaml(resolve_config(config)[0].to_yaml_dict()), end="")
        return 0
    overwrite, resume = getattr(args, "overwrite", False), getattr(args, "resume", False)
    # task definitions, flags, data root, run directory and files: refused in well under a second, before the
    # trainer (torch, Lightning: seconds) is imported; fit makes the same checks again for API callers
    config = check_run(config, overwrite=overwrite, resume=resume)[0]
    # keeps torch out of import time
    from ..training.trainer import fit

    try:
        run = fit(config, overwrite=overwrite, resume=resume)
    except RunStopped as err:
        print(f"{err.label}: {err}", file=sys.stderr)
        return err.exit_code
    if run.complete:  # rank 0
        best = run.best
        print(f"best epoch {best['epoch']}: average {best['average']:.4f} "
              + " ".join(f"{t}={next(iter(v.values())):.4f}" for t, v in best["tasks"].items()))
        print(f"run directory: {run.directory}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-train``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
