"""``python -m mtdnn.diagnose SUBCOMMAND``: flags -> the diagnostics' API -> files and an exit code.

Examples::

    python -m mtdnn.diagnose hans runs/rte --task rte --data-dir ../shared/data        # the 600-pair sample
    python -m mtdnn.diagnose hans --rule word-overlap --hans FILE --output-dir runs/hans-rule
    python -m mtdnn.diagnose arct runs/arct --data-dir ../shared/data
    python -m mtdnn.diagnose cues --task snli --data-dir ../shared/data
    python -m mtdnn.diagnose partial-input --task snli --input hypothesis --seeds 42,43,44
    python -m mtdnn.diagnose report runs/rte --data-dir ../shared/data

Outputs go to ``--output-dir`` (default ``RUN/diagnose``, or ``runs/diagnose-...`` without a run): JSON, a table on
stdout and, for ``hans``, ``arct``, ``partial-input`` and ``report``, a PNG (``cues`` writes tables only). Bad input (files, flags, a task the diagnostic does not fit) exits 2 with a message.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..errors import ConfigError, HelpFormatter, RawHelpFormatter, run_cli
from ..evaluation.diagnostics.hans import (
    RULES,
    entailment_label_map,
    format_hans_table,
    hans_diagnosis,
    model_predictor,
    parse_label_map,
    write_hans_outputs,
)
from ..evaluation.diagnostics.hans_file import DEFAULT_HANS, open_hans
from ..evaluation.diagnostics.outputs import check_diagnose_dir, claim_diagnose_dir
from ..fileio import write_atomic, write_json_atomic
from ..tasks.reading import resolve_data_dir
from ..tasks.taskdef import load_task_defs, select_tasks, shipped_task_defs
from ..training.config import SEED_MAX
from .common import add_trust_remote_code_arg, float_in, max_length_int, positive_int, task_list

AS_TRAIN = "as python -m mtdnn.train's flag of that name"

DEFAULT_TASK_DEFS = {"arct": "arct.yaml", "arct_adv": "arct.yaml", "mnli": "nli.yaml"}


def _model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("model", nargs=None if required else "?", default=None,
                   help="a complete run directory or an export directory")
    p.add_argument("--checkpoint", default=None, help="a checkpoint of the run instead of its best")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto")
    add_trust_remote_code_arg(p)


def _common(p: argparse.ArgumentParser, default_output: str = "MODEL/diagnose") -> None:
    with_model = default_output.startswith("MODEL")
    p.add_argument("--data-dir", default=None,
                   help="data root (default: " + ("the run's, else " if with_model else "")
                        + "$MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--output-dir", default=None, help=f"where the JSON and PNG go (default: {default_output})")


def _cue_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cue statistics")
    g.add_argument("--top", type=positive_int, default=10, help="cues per table")
    g.add_argument("--min-applicability", type=positive_int, default=10,
                   help="a cue is ranked only with at least this many applicable examples")
    g.add_argument("--cue", type=task_list, default="not,n't,no", help="cues always listed, comma-separated")
    g.add_argument("--smoothing", type=float_in(0), default=100.0,
                   help="add-s smoothing of PMI (Gururangan et al.: 100)")
    g.add_argument("--negation-as-not", action="store_true", help="count the contraction n't as the cue 'not'")
    g.add_argument("--applicability", choices=["exclusive", "any"], default="exclusive",
                   help="warrant cues: in exactly one warrant (Niven and Kao's eq. 1) or in either")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mtdnn.diagnose", description=__doc__.split("\n\n")[0],
                                formatter_class=RawHelpFormatter, epilog=__doc__.split("\n\n", 1)[1].replace("::", ":"))
    sub = p.add_subparsers(dest="command", required=True)
    fmt = HelpFormatter

    h = sub.add_parser("hans", help="HANS accuracy per heuristic x gold label (McCoy et al. 2019)", formatter_class=fmt)
    _model_args(h, required=False)
    h.add_argument("--task", default=None, help="the run's NLI task (default: its only classification task over "
                   "two texts, or mnli)")
    h.add_argument("--rule", choices=["word-overlap"], default=None,
                   help="score a rule instead of a model: entailment iff every hypothesis word is in the premise")
    h.add_argument("--hans", default=None, help="HANS file (default: hans/sample/hans_sample600.txt under the data root)")
    h.add_argument("--hans-index", default=None, help="index of a headerless sample file (default: <stem>_index.tsv)")
    h.add_argument("--label-map", default=None,
                   help="LABEL=entailment|non-entailment,... for labels whose names do not say it")
    h.add_argument("--batch-size", type=positive_int, default=64, help="rows read, tokenized and scored at once")
    _common(h)

    a = sub.add_parser("arct", help="adversarial ARCT: original vs claim-negated rows (Niven and Kao 2019)",
                       formatter_class=fmt)
    _model_args(a)
    a.add_argument("--task", default=None, help="the run's ARCT task (default: its only ranking task)")
    a.add_argument("--adversarial", default="arct_adversarial/dev-adv-negated.csv",
                   help="adversarial file, relative to the data root or absolute")
    a.add_argument("--batch-size", type=positive_int, default=None, help="default: the run's eval batch size")
    _common(a)

    c = sub.add_parser("cues", help="cue statistics: applicability, productivity, coverage (and PMI for NLI)",
                       formatter_class=fmt)
    c.add_argument("--task", required=True, help="task name, e.g. arct, rte, snli, mnli")
    c.add_argument("--task-defs", default=None,
                   help="task-definition YAML (default: task_defs/arct.yaml for arct, nli.yaml for mnli, else glue.yaml)")
    c.add_argument("--splits", type=task_list, default=None, help="comma-separated; a+b pools splits (default: train and dev)")
    _cue_flags(c)
    _common(c, "runs/diagnose-cues-TASK")

    q = sub.add_parser("partial-input", help="partial-input baselines beside majority class and full input",
                       formatter_class=fmt)
    q.add_argument("--task", required=True, help="the task to train on one input (e.g. mnli, snli, arct)")
    q.add_argument("--task-defs", default=None, help="as for cues")
    q.add_argument("--input", required=True, choices=["hypothesis", "premise", "warrants"])
    q.add_argument("--seeds", type=task_list, default="42,43,44", help="comma-separated training seeds")
    q.add_argument("--no-full", action="store_true", help="train only the partial-input variant")
    g = q.add_argument_group("recipe (python -m mtdnn.train flags, the same for every run)")
    g.add_argument("--encoder", default="packaged-minilm", help=AS_TRAIN)
    g.add_argument("--max-epochs", type=positive_int, default=3, help=AS_TRAIN)
    g.add_argument("--batch-size", type=positive_int, default=32, help=AS_TRAIN)
    g.add_argument("--lr", type=float_in(0, 1, low_open=True, high_open=False), default=5e-5, help=AS_TRAIN)
    g.add_argument("--max-length", type=max_length_int, default=None, help=AS_TRAIN)
    g.add_argument("--limit-train-examples", type=positive_int, default=None, help=AS_TRAIN)
    g.add_argument("--accelerator", default="auto", help=AS_TRAIN)
    _common(q, "runs/diagnose-partial-TASK-INPUT")

    r = sub.add_parser("report", help="report.md with every applicable table and plot", formatter_class=fmt)
    _model_args(r)
    r.add_argument("--hans", default=None, help="as for hans")
    r.add_argument("--hans-index", default=None)
    r.add_argument("--label-map", default=None, help="as for hans")
    r.add_argument("--adversarial", default="arct_adversarial/dev-adv-negated.csv")
    r.add_argument("--partial-input", type=lambda t: [Path(x) for x in task_list(t)], default=[],
                   help="finished partial-input result JSON files, comma-separated")
    r.add_argument("--batch-size", type=positive_int, default=64)
    _cue_flags(r)
    _common(r)
    return p


def _pick_task(loaded, given: str | None, kind: str) -> str:
    if given is not None:
        loaded.task(given)
        return given
    if kind == "nli":
        fits = [n for n, t in loaded.tasks.items() if t.kind.classifies and len(t.text) == 2]
    else:
        fits = [n for n, t in loaded.tasks.items() if t.kind.ranks_candidates and t.num_candidates == 2]
    if len(fits) == 1:
        return fits[0]
    if kind == "nli" and "mnli" in fits:
        return "mnli"
    raise ConfigError(f"{loaded.model_dir}: give --task (the model's tasks: {', '.join(loaded.tasks)})")


def _task_def(name: str, task_defs: str | None):
    default = Path("task_defs") / DEFAULT_TASK_DEFS.get(name, "glue.yaml")
    path = Path(task_defs) if task_defs else shipped_task_defs(default)
    return select_tasks(load_task_defs(path), [name], str(path))[name]


def _cue_settings(args):
    # keeps torch out of import time
    from ..evaluation.diagnostics.cues import CueSettings

    return CueSettings(top=args.top, min_applicability=args.min_applicability, cues=args.cue,
                       smoothing=args.smoothing, negation_as_not=args.negation_as_not,
                       applicability=args.applicability)


def _hans(args) -> int:
    if (args.model is None) == (args.rule is None):
        raise ConfigError("hans: give a MODEL (run or export) or --rule, not both and not neither")
    overrides = parse_label_map(args.label_map)
    if args.rule:
        data_dir = resolve_data_dir(args.data_dir) if args.hans is None else None
        hans = open_hans(args.hans or data_dir / DEFAULT_HANS, args.hans_index)
        output = check_diagnose_dir(args.output_dir or Path("runs") / f"diagnose-hans-{args.rule}")
        result = hans_diagnosis(hans, RULES[args.rule], f"rule:{args.rule}", args.batch_size)
    else:
        # keeps torch out of import time
        from ..training.inference import load_model, resolve_device

        loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
        name = _pick_task(loaded, args.task, "nli")
        mapping = entailment_label_map(loaded.task(name), overrides)
        hans = open_hans(args.hans or loaded.resolve_data_dir(args.data_dir) / DEFAULT_HANS, args.hans_index)
        output = check_diagnose_dir(args.output_dir or loaded.model_dir / "diagnose")
        predict = model_predictor(loaded, loaded.task(name), mapping, resolve_device(args.device))
        result = hans_diagnosis(hans, predict, str(loaded.model_dir), args.batch_size, task=name, label_map=mapping)
    files = write_hans_outputs(result, output)
    print(format_hans_table(result["summary"]))
    print(f"heuristic and subcase: {result['heuristic_source']}\nwritten: {files['json']}, {files['png']}", file=sys.stderr)
    return 0


def _arct(args) -> int:
    # keeps torch out of import time
    from ..evaluation.diagnostics.arct import arct_diagnosis, format_arct_table, write_arct_outputs
    from ..training.inference import load_model, resolve_device

    loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
    name = _pick_task(loaded, args.task, "ranking")
    data_dir = loaded.resolve_data_dir(args.data_dir)
    output = check_diagnose_dir(args.output_dir or loaded.model_dir / "diagnose")
    result = arct_diagnosis(loaded, name, args.adversarial, data_dir, resolve_device(args.device), args.batch_size)
    files = write_arct_outputs(result, output)
    print(format_arct_table(result))
    print(f"written: {files['json']}, {files['png']}", file=sys.stderr)
    return 0


def _cues(args) -> int:
    # keeps torch out of import time
    from ..evaluation.diagnostics.cues import cue_statistics, format_cue_tables

    task = _task_def(args.task, args.task_defs)
    data_dir = resolve_data_dir(args.data_dir)
    splits = args.splits or [s for s in ("train", "dev") if s in task.splits]
    output = check_diagnose_dir(args.output_dir or Path("runs") / f"diagnose-cues-{task.name}")
    result = cue_statistics(task, splits, data_dir, _cue_settings(args))
    table = format_cue_tables(result)
    claim_diagnose_dir(output)
    write_json_atomic(output / f"diagnose-cues-{task.name}.json", result)
    write_atomic(output / f"diagnose-cues-{task.name}.md", table)
    print(table)
    print(f"written: {output}/diagnose-cues-{task.name}.json and .md", file=sys.stderr)
    return 0


def _partial(args) -> int:
    # keeps torch out of import time
    from ..evaluation.diagnostics.partial_input import (
        Recipe,
        format_partial_table,
        partial_input_baselines,
        write_partial_outputs,
    )

    task = _task_def(args.task, args.task_defs)
    for needed in ("train", "dev"):
        if needed not in task.splits:
            raise ConfigError(f"task '{task.name}' has no {needed} split; partial-input baselines train and score on dev")
    try:
        seeds = [int(s) for s in args.seeds]
    except ValueError:
        raise ConfigError(f"--seeds: expected integers, comma-separated (got {','.join(args.seeds)})") from None

    if any(not 0 <= s <= SEED_MAX for s in seeds):
        raise ConfigError(f"--seeds: each seed must be from 0 to {SEED_MAX} (got {','.join(args.seeds)})")
    recipe = Recipe(encoder=args.encoder, max_epochs=args.max_epochs, batch_size=args.batch_size, lr=args.lr,
                    max_length=args.max_length, limit_train_examples=args.limit_train_examples,
                    accelerator=args.accelerator)
    output = check_diagnose_dir(args.output_dir or Path("runs") / f"diagnose-partial-{task.name}-{args.input}")
    result = partial_input_baselines(task, args.input, seeds, resolve_data_dir(args.data_dir), output, recipe,
                                     full=not args.no_full)
    files = write_partial_outputs(result, output)
    print(format_partial_table(result))
    print(f"written: {files['json']}, {files['png']}", file=sys.stderr)
    return 0


def _report(args) -> int:
    # keeps torch out of import time
    from ..evaluation.diagnostics.report import ReportInputs, read_partial_result, write_report
    from ..training.inference import load_model, resolve_device

    overrides = parse_label_map(args.label_map)
    for source in args.partial_input:  # checked before any diagnostic writes a file
        if not source.is_file():
            raise ConfigError(f"--partial-input {source}: no such file")
        read_partial_result(source)
    loaded = load_model(args.model, args.checkpoint, args.trust_remote_code)
    data_dir = loaded.resolve_data_dir(args.data_dir)
    inputs = ReportInputs(data_dir=data_dir, hans_file=Path(args.hans) if args.hans else data_dir / DEFAULT_HANS,
                          hans_index=Path(args.hans_index) if args.hans_index else None, label_map=overrides,
                          adversarial=args.adversarial, partial_input=list(args.partial_input),
                          cue_settings=_cue_settings(args), device=resolve_device(args.device),
                          batch_size=args.batch_size)
    output = check_diagnose_dir(args.output_dir or loaded.model_dir / "diagnose")
    path, contents = write_report(loaded, inputs, output)
    for task, sections in contents.items():
        print(f"{task}: {', '.join(sections) or 'no applicable diagnostic'}")
    print(f"written: {path}", file=sys.stderr)
    return 0


COMMANDS = {"hans": _hans, "arct": _arct, "cues": _cues, "partial-input": _partial, "report": _report}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return COMMANDS[args.command](args)


def cli() -> None:
    """Console-script entry point (``mtdnn-diagnose``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
