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
from ..training.config import LOGGERS, TrainConfig, load_config, validate_config
from .common import (add_trainer_args, float_in, max_length_int, name_list, positive_float, positive_int,
                     setup_logging)

NOT_SETTINGS = ("config", "overwrite", "resume", "print_config")  # what to do with the run directory, not how to train


def _logger_list(text: str) -> list[str]:
    names = name_list(text)
    bad = [n for n in names if n not in LOGGERS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown logger {bad[0]!r} (choose from {', '.join(LOGGERS)})")
    return names


def build_parser() -> argparse.ArgumentParser:
    """Every flag defaults to ``SUPPRESS``: the parsed namespace holds only the flags given."""
    defaults = {name: field.default for name, field in TrainConfig.model_fields.items()}

    def d(name: str) -> str:
        return f" (default: {defaults[name]})"

    S = argparse.SUPPRESS
    p = argparse.ArgumentParser(prog="python -m mtdnn.train", description=__doc__.split("\n\n")[0],
                                argument_default=S, formatter_class=HelpFormatter)
    p.add_argument("task_defs", nargs="?", help="task-definition YAML (e.g. task_defs/glue.yaml)")
    p.add_argument("--config", metavar="YAML",
                   help="a TrainConfig file, e.g. a run's config.yaml: rerun it; flags given beside it override")
    p.add_argument("--tasks", type=name_list,
                   help="comma-separated tasks to train (default: every task with a train split)")
    p.add_argument("--data-dir", help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--encoder", help="Hugging Face encoder name or path; packaged-minilm is the embedded "
                                     "all-MiniLM-L6-v2" + d("encoder"))
    p.add_argument("--init-from", help="start from an earlier run's (or export's) encoder and the heads of matching "
                                       "tasks")
    p.add_argument("--output-dir", help="run directory (default: runs/<task-defs>-<tasks>-seed<seed>)")
    p.add_argument("--overwrite", action="store_true", help="replace a run directory that holds a complete run")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --output-dir from checkpoints/last.ckpt (same settings)")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config (YAML, as config.yaml holds it without its resolved section) and "
                        "exit: nothing is trained or written")
    p.add_argument("--checkpoint-every-n-steps", type=positive_int, metavar="N",
                   help="also save checkpoints/last.ckpt every N optimizer steps (always at epoch ends and on SIGTERM)")
    p.add_argument("--loggers", type=_logger_list,
                   help=f"comma-separated loggers, from {', '.join(LOGGERS)}; W&B runs offline and MLflow writes "
                        "local files, both under the run's logs/ (default: csv, and tensorboard when installed)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-epochs", type=positive_int, help="training epochs" + d("max_epochs"))
    g.add_argument("--max-steps", type=positive_int, metavar="N", help="stop after N optimizer steps (default: none)")
    g.add_argument("--batch-size", type=positive_int,
                   help="global batch size (all ranks together), per batch" + d("batch_size"))
    g.add_argument("--accumulate-grad-batches", type=positive_int, metavar="K",
                   help="batches per optimizer step (gradient accumulation; each batch is one task's)"
                        + d("accumulate_grad_batches"))
    g.add_argument("--eval-batch-size", type=positive_int, help="dev batch size per rank" + d("eval_batch_size"))
    g.add_argument("--lr", type=float_in(0, 1, low_open=True, high_open=False),
                   help="peak learning rate (AdamW), in (0, 1]" + d("lr"))
    g.add_argument("--weight-decay", type=float_in(0), help="AdamW weight decay (not on biases, LayerNorm)"
                                                            + d("weight_decay"))
    g.add_argument("--warmup-ratio", type=float_in(0, 1), help="fraction of steps with linear warm-up"
                                                               + d("warmup_ratio"))
    g.add_argument("--gradient-clip", type=float_in(0), help="max gradient norm (0: none)" + d("gradient_clip"))
    g.add_argument("--max-length", type=max_length_int,
                   help="override every task's max sequence length (default: each task's, 128 in glue.yaml)")
    g.add_argument("--schedule", choices=["proportional", "temperature", "uniform"],
                   help="task schedule: proportional = MT-DNN Algorithm 1" + d("schedule"))
    g.add_argument("--temperature", type=positive_float,
                   help="T of temperature sampling, p_t ~ n_t^(1/T) (only with --schedule temperature)"
                        + d("temperature"))
    g.add_argument("--group-by-length", action=argparse.BooleanOptionalAction,
                   help="length-grouped batches: each chunk of 50 batches' rows sorted by length, then cut (less "
                        "padding; the order of batches stays random); --no-group-by-length: random batches, as "
                        "a Hugging Face Trainer's default" + d("group_by_length"))
    g.add_argument("--seed", type=int, help="seed of initialisation, dropout and (without --data-seed) the "
                   "schedule and data order" + d("seed"))
    g.add_argument("--data-seed", type=int, help="seed of the task schedule and data order alone (default: --seed)")
    g.add_argument("--limit-train-examples", type=positive_int, metavar="N",
                   help="use the first N rows of each task's train split")
    g.add_argument("--limit-eval-examples", type=positive_int, metavar="N",
                   help="score the first N rows of each task's dev split (a quick run; its default run directory "
                        "is marked -limited)")
    g.add_argument("--pad-to-multiple-of", type=positive_int, help="pad lengths to a multiple (8 on GPU)"
                                                                   + d("pad_to_multiple_of"))
    g.add_argument("--dropout", type=float_in(0, 1),
                   help="override every dropout probability, encoder and heads (default: the encoder's and tasks')")
    g = p.add_argument_group("dev evaluation")
    g.add_argument("--eval-every-n-steps", type=positive_int, metavar="N",
                   help="score dev every N optimizer steps instead of at epoch ends; the best of these is kept")
    g.add_argument("--early-stopping-patience", type=positive_int, metavar="P",
                   help="stop when the dev average has not improved for P evaluations (default: never)")
    p.add_argument("--trust-remote-code", action="store_const", const=True,
                   help="allow encoders with custom code from the hub (off by default)")
    p.add_argument("--deterministic", action="store_const", const=True,
                   help="deterministic algorithms only (torch.use_deterministic_algorithms; reproducible reruns)")
    add_trainer_args(p, defaults={name: S for name in ("accelerator", "devices", "strategy", "num_nodes", "precision",
                                                       "num_workers", "keep_last_checkpoint", "compile")})
    add_speed_args(p)
    return p


def add_speed_args(parser: argparse.ArgumentParser) -> None:
    """Speed flags of training (see :mod:`mtdnn.training.speed`); all off by default."""
    from ..training.speed import SDPA_BACKENDS, parse_buckets

    def buckets(text: str) -> list[int]:
        try:
            return parse_buckets(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    g = parser.add_argument_group("speed (see the README's GPU section)")
    g.add_argument("--length-buckets", type=buckets, metavar="L1,L2,...",
                   help="pad every batch to the shortest of these lengths that holds it: with --compile, one graph "
                        "per bucket (e.g. 32,64,96,128)")
    g.add_argument("--cuda-graphs", action="store_const", const=True,
                   help="record CUDA graphs per bucket (GPU; needs --compile inductor and --length-buckets)")
    g.add_argument("--sdpa-backend", choices=SDPA_BACKENDS,
                   help="attention kernels: efficient = flash/memory-efficient, never cuDNN (no plan per shape) "
                        "(default: auto)")


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
    from ..training.trainer import fit

    config = config_from_args(args)
    if getattr(args, "print_config", False):
        from ..fileio import dump_yaml
        from ..training.trainer import resolve_config

        print(dump_yaml(resolve_config(config)[0].to_yaml_dict()), end="")
        return 0
    try:
        run = fit(config, overwrite=getattr(args, "overwrite", False), resume=getattr(args, "resume", False))
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
