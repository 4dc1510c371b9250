"""The token-level tasks beside a Hugging Face reference: the toolkit's dev F1 (and EM) against a plain
``transformers`` ``Trainer`` fine-tune of the same encoder on the same examples with the same hyper-parameters.

One task per call (issue 18's "what must show"; hours on a 2-core CPU, minutes on a GPU)::

    .venv/bin/python bench/token_references.py --task conll2003 --output-dir /work/runs/token-refs   # 3 epochs
    .venv/bin/python bench/token_references.py --task wnut17 --output-dir /work/runs/token-refs      # 3 epochs
    .venv/bin/python bench/token_references.py --task squad --output-dir /work/runs/token-refs       # 2 epochs

Two arms, both from the splits of ``task_defs/ner.yaml`` or ``task_defs/squad.yaml`` (``--task-defs``) read by the
toolkit's readers (:func:`mtdnn.tasks.data.load_split`: the CoNLL reader, the SQuAD reader and its seeded carve
by article), so both see identical examples:

- ``mtdnn``: ``mtdnn.fit(mtdnn.TrainConfig(...))`` in ``<output-dir>/mtdnn``; its scores are read from the run's
  ``metrics.json`` (the best epoch, as the toolkit selects it on dev);
- ``reference``: :mod:`hf_reference` (``run_ner`` / ``run_qa`` with a ``Trainer``), scored after every epoch
  with the toolkit's metric code (entity F1 equal to seqeval's default mode; SQuAD v1.1 EM/F1); its best epoch.

Shared: lr 5e-5, batch 32, eval batch 64, warm-up ratio 0.1, weight decay 0.01, gradient clipping 1.0, the
task's max length (256) and doc_stride (64), seed 42, fp32 (flags change them). ``--limit-train-examples`` and
``--limit-eval-examples`` keep the first N rows of each split in both arms (sentences; SQuAD: windows), for
smoke runs. For SQuAD the script checks that the toolkit's run carved the same dev articles as the reference
read (``carves.json``).

Each finished arm is kept in ``<output-dir>/<arm>-result.json`` with what it depends on (task, task definitions,
data root, settings), and a later call with the same settings reuses it (``--rerun`` trains again). So the arms
can run as two processes, one core each, or in two sessions, and a last call combines them::

    .venv/bin/python bench/token_references.py --task conll2003 --output-dir /work/runs/token-refs --arms mtdnn &
    .venv/bin/python bench/token_references.py --task conll2003 --output-dir /work/runs/token-refs --arms reference
    .venv/bin/python bench/token_references.py --task conll2003 --output-dir /work/runs/token-refs   # combines

An ablation of the toolkit's recipe alone (``--no-mtdnn-group-by-length``: random batches as the reference's;
``--mtdnn-token-loss token_cross_entropy_per_piece``: the batch's mean over labelled pieces as ``run_ner``) trains
``<output-dir>/mtdnn-<variant>`` and reuses the kept reference arm; its report is
``token-references-<task>-<variant>.json``.

Over seeds (``--seed``, one output directory each), ``summary`` gives each arm's mean ± sd and the paired
difference::

    .venv/bin/python bench/token_references.py summary /work/runs/token-refs/wnut17*/token-references-wnut17.json \
        --json bench/results/token-references-wnut17-3seeds.json

Prints a Markdown table (task, arm, F1, EM, best epoch, train seconds: the wall-clock time of the whole fit,
dev evaluation after each epoch included, the toolkit's tokenization and export too) and writes JSON atomically
(``--json``, default ``<output-dir>/token-references-<task>.json``): both arms, ``f1_difference`` (mtdnn minus
reference, F1 points) and ``within_target`` (``|difference| <= 1.0``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json_file  # noqa: E402  (bench/common.py)

TASK_DEFS = {"conll2003": "ner.yaml", "wnut17": "ner.yaml", "squad": "squad.yaml"}
DEFAULT_EPOCHS = {"conll2003": 3, "wnut17": 3, "squad": 2}
TARGET_F1_GAP = 1.0  # issue 18: within 1.0 F1 of the reference
DEFAULT_MTDNN_OPTIONS = {"group_by_length": True, "token_loss": None}
"""The toolkit arm's own recipe (length-grouped batches, its task's loss); anything else is an ablation."""
ARMS = ("mtdnn", "reference")


def mtdnn_task_defs(defs: Path, task_name: str, token_loss: str | None, output_dir: Path) -> Path:
    """``defs`` itself, or (``token_loss`` given) a copy under ``output_dir`` whose task ``task_name`` names that
    loss (``loss:`` of the task definition), for an ablation of the toolkit's arm alone."""
    if token_loss is None:
        return defs
    import yaml

    document = yaml.safe_load(defs.read_text(encoding="utf-8"))
    document["tasks"][task_name]["loss"] = token_loss
    path = output_dir.parent / f"task_defs-{output_dir.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def run_mtdnn(task, defs: Path, data_dir: Path, settings, output_dir: Path, group_by_length: bool = True,
              token_loss: str | None = None) -> dict:
    """The toolkit's arm: ``mtdnn.fit`` with the shared settings; scores (percent) from ``metrics.json``.
    ``group_by_length`` and ``token_loss`` (a sequence-labelling loss name) change the toolkit's recipe alone."""
    import mtdnn

    defs = mtdnn_task_defs(defs, task.name, token_loss, output_dir)
    config = mtdnn.TrainConfig(group_by_length=group_by_length,
        task_defs=str(defs), tasks=[task.name], data_dir=str(data_dir), encoder=settings.encoder,
        output_dir=str(output_dir), max_epochs=settings.epochs, batch_size=settings.batch_size,
        eval_batch_size=settings.eval_batch_size, lr=settings.lr, weight_decay=settings.weight_decay,
        warmup_ratio=settings.warmup_ratio, gradient_clip=settings.gradient_clip, max_length=settings.max_length,
        seed=settings.seed, limit_train_examples=settings.limit_train_examples,
        limit_eval_examples=settings.limit_eval_examples, accelerator=settings.accelerator, devices=1)
    began = time.perf_counter()
    run = mtdnn.fit(config, overwrite=True)
    seconds = time.perf_counter() - began
    metrics = json.loads((run.directory / "metrics.json").read_text(encoding="utf-8"))
    f1_key = "squad_f1" if task.type == "span_extraction" else "entity_f1"

    def percent(scores: dict) -> dict:
        return {"f1": 100 * scores[f1_key],
                "exact_match": 100 * scores["exact_match"] if "exact_match" in scores else None}

    best = metrics["best"]
    result = {**percent(best["tasks"][task.name]), "best_epoch": best["epoch"],
              "epochs": [{"epoch": e["epoch"], **percent(e["tasks"][task.name])} for e in metrics["epochs"]],
              "train_seconds": seconds, "run_dir": str(run.directory)}
    carves = run.directory / "carves.json"
    if carves.is_file():
        result["carves"] = json.loads(carves.read_text(encoding="utf-8")).get(task.name)
    return result


def run_reference(task, data_dir: Path, settings, output_dir: Path) -> dict:
    """The Hugging Face arm on the same splits (:mod:`hf_reference`)."""
    from hf_reference import qa_reference, tagging_reference

    from mtdnn.tasks.data import load_split

    train = load_split(task, "train", data_dir).examples
    dev = load_split(task, "dev", data_dir).examples
    if task.type == "span_extraction":
        result = qa_reference(train, dev, settings, str(output_dir))
        result["carves"] = {"train": list(dict.fromkeys(ex.title for ex in train)),
                            "dev": list(dict.fromkeys(ex.title for ex in dev))}
        return result
    return tagging_reference(task, train, dev, settings, str(output_dir))


def arm_key(task_name: str, defs: Path, data_dir: Path, settings) -> dict:
    """What an arm's result depends on: the task, the task definitions' bytes, the data root and the settings."""
    return {"task": task_name, "task_defs_sha256": hashlib.sha256(defs.read_bytes()).hexdigest(),
            "data_dir": str(data_dir), "settings": dataclasses.asdict(settings)}


def run_arm(arm: str, runner, key: dict, out: Path, *, rerun: bool = False, name: str | None = None) -> dict:
    """Run one arm, or reuse ``<out>/<arm>-result.json`` when it was written with the same :func:`arm_key`.

    Each finished arm is written there atomically, so the two arms can run as separate calls (two processes, or
    two sessions) and a last call with both arms combines them without training again. ``rerun`` ignores the file.
    """
    cached = out / f"{name or arm}-result.json"
    if cached.is_file() and not rerun:
        stored = json.loads(cached.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            print(f"{arm}: reusing {cached} (same task, task definitions, data root and settings; --rerun to train)")
            return stored["result"]
        print(f"{arm}: {cached} was written with other settings; training again")
    result = runner()
    write_json_file(cached, {"key": key, "result": result})
    return result


def compare(results: dict) -> dict:
    """``f1_difference`` (mtdnn minus reference) and ``within_target``, when both arms ran."""
    if not all(arm in results for arm in ARMS):
        return {}
    difference = results["mtdnn"]["f1"] - results["reference"]["f1"]
    same_carve = None
    if "carves" in results["mtdnn"] and "carves" in results["reference"]:
        same_carve = results["mtdnn"]["carves"] == results["reference"]["carves"]
    return {"f1_difference": difference, "target_f1_gap": TARGET_F1_GAP,
            "within_target": abs(difference) <= TARGET_F1_GAP, "same_carve": same_carve}


def summarize(reports: list[dict]) -> dict:
    """Mean and sample sd over seeds of each arm's F1 (and EM), and of the paired difference (mtdnn minus
    reference, same seed), from reports this script wrote with both arms; ``within_target`` on the mean difference.

    Raises:
        ValueError: the reports are of different tasks or settings other than the seed, lack an arm, or repeat a
            seed.
    """
    import statistics

    def spread(values):
        return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
                "values": values}

    tasks = {r["task"] for r in reports}
    # a report written before mtdnn_options existed ran the defaults
    others = {json.dumps([{k: v for k, v in r.get("settings", {}).items() if k != "seed"},
                          r.get("mtdnn_options") or DEFAULT_MTDNN_OPTIONS], sort_keys=True) for r in reports}
    seeds = [r.get("seed") for r in reports]
    if len(tasks) != 1 or len(others) != 1:
        raise ValueError(f"the reports are of different tasks or settings: {sorted(tasks)}")
    if None in seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"each report needs its own seed (found {seeds})")
    if not all(arm in r for r in reports for arm in ARMS):
        raise ValueError("every report needs both arms (run the last call without --arms)")
    out = {"task": tasks.pop(), "seeds": seeds,
           "mtdnn_options": reports[0].get("mtdnn_options") or DEFAULT_MTDNN_OPTIONS}
    for arm in ARMS:
        out[arm] = {"f1": spread([r[arm]["f1"] for r in reports])}
        if reports[0][arm]["exact_match"] is not None:
            out[arm]["exact_match"] = spread([r[arm]["exact_match"] for r in reports])
    out["f1_difference"] = spread([r["mtdnn"]["f1"] - r["reference"]["f1"] for r in reports])
    out["target_f1_gap"] = TARGET_F1_GAP
    out["within_target"] = abs(out["f1_difference"]["mean"]) <= TARGET_F1_GAP
    return out


def summary_table(summary: dict) -> str:
    """The Markdown table of :func:`summarize` (mean ± sd over seeds, then each seed's value)."""
    def cell(s):
        sd = "" if s["sd"] is None else f" ± {s['sd']:.2f}"
        return f"{s['mean']:.2f}{sd} ({', '.join(f'{v:.2f}' for v in s['values'])})"

    lines = [f"seeds: {', '.join(map(str, summary['seeds']))}", "| task | arm | F1 | EM |", "|---|---|---|---|"]
    for arm in ARMS:
        em = summary[arm].get("exact_match")
        lines.append(f"| {summary['task']} | {arm} | {cell(summary[arm]['f1'])} | {cell(em) if em else '-'} |")
    lines.append(f"| {summary['task']} | mtdnn - reference | {cell(summary['f1_difference'])} | |")
    return "\n".join(lines)


def table(task: str, results: dict) -> str:
    """The Markdown table printed at the end."""
    def number(x):
        return "-" if x is None else f"{x:.2f}"

    lines = ["| task | arm | F1 | EM | best epoch | train s |", "|---|---|---:|---:|---:|---:|"]
    for arm in ARMS:
        if arm in results:
            r = results[arm]
            lines.append(f"| {task} | {arm} | {number(r['f1'])} | {number(r['exact_match'])} | {r['best_epoch']} | "
                         f"{r['train_seconds']:.0f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", required=True, choices=sorted(TASK_DEFS))
    p.add_argument("--output-dir", required=True, help="run directories of both arms go under it (not in the repo)")
    p.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--task-defs", default=None, help="task definitions (default: task_defs/ner.yaml or squad.yaml)")
    p.add_argument("--encoder", default="packaged-minilm", help="Hugging Face encoder name or path")
    p.add_argument("--epochs", type=int, default=None, help="default: 3 for NER, 2 for SQuAD")
    p.add_argument("--limit-train-examples", type=int, default=None, metavar="N",
                   help="first N train rows in both arms (sentences; SQuAD: windows); for smoke runs")
    p.add_argument("--limit-eval-examples", type=int, default=None, metavar="N", help="first N dev rows, likewise")
    p.add_argument("--accelerator", default="auto", help="cpu, gpu or auto (the reference: cpu or not)")
    p.add_argument("--arms", default=",".join(ARMS), help="which arms to run")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-length", type=int, default=None, help="default: the task's (256)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", default=None, help="default: <output-dir>/token-references-<task>.json")
    p.add_argument("--mtdnn-group-by-length", action=argparse.BooleanOptionalAction, default=True,
                   help="the toolkit's arm: length-grouped batches (its default) or random ones (the reference's)")
    p.add_argument("--mtdnn-token-loss", choices=["token_cross_entropy", "token_cross_entropy_per_piece"],
                   default=None, help="the toolkit's arm on a sequence-labelling task: its loss (default: the task "
                                      "definition's, token_cross_entropy, a mean per sentence; _per_piece: the "
                                      "batch's mean over labelled pieces, as run_ner)")
    p.add_argument("--rerun", action="store_true",
                   help="train every chosen arm even when <output-dir>/<arm>-result.json holds its result for the "
                        "same settings (by default that result is reused, so arms can run as separate calls)")
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "summary":
        return summary_main(argv[1:])
    args = build_parser().parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        raise SystemExit(f"--arms {args.arms}: choose from {', '.join(ARMS)}")
    from hf_reference import ReferenceSettings

    from mtdnn.errors import UserError
    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks

    try:
        defs = Path(args.task_defs or ROOT / "task_defs" / TASK_DEFS[args.task]).resolve()
        task = select_tasks(load_task_defs(defs), [args.task], str(defs))[args.task]
        data_dir = resolve_data_dir(args.data_dir)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    qa = task.qa_spec if task.type == "span_extraction" else None
    settings = ReferenceSettings(
        encoder=args.encoder, epochs=args.epochs or DEFAULT_EPOCHS[args.task], lr=args.lr, batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size, warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay,
        gradient_clip=1.0, max_length=args.max_length or task.max_length, seed=args.seed,
        accelerator=args.accelerator, limit_train_examples=args.limit_train_examples,
        limit_eval_examples=args.limit_eval_examples,
        **({"doc_stride": qa.doc_stride, "n_best": qa.n_best, "max_answer_length": qa.max_answer_length} if qa else {}))
    out = Path(args.output_dir)
    key = arm_key(args.task, defs, data_dir, settings)
    options = {"group_by_length": args.mtdnn_group_by_length, "token_loss": args.mtdnn_token_loss}
    ablation = options != DEFAULT_MTDNN_OPTIONS
    variant = "mtdnn" if not ablation else "mtdnn-" + "-".join(
        (["random-batches"] if not args.mtdnn_group_by_length else []) + ([args.mtdnn_token_loss] if args.mtdnn_token_loss else []))
    runners = {"mtdnn": lambda: run_mtdnn(task, defs, data_dir, settings, out / variant, **options),
               "reference": lambda: run_reference(task, data_dir, settings, out / "reference")}
    keys = {"mtdnn": {**key, "mtdnn_options": options} if ablation else key, "reference": key}
    results = {}
    try:
        for arm in ARMS:
            if arm in arms:
                results[arm] = run_arm(arm, runners[arm], keys[arm], out, rerun=args.rerun,
                                       name=variant if arm == "mtdnn" else None)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import torch
    import transformers

    report = {"task": args.task, "task_defs": str(defs), "data_dir": str(data_dir), "encoder": args.encoder,
              "seed": args.seed, "settings": dataclasses.asdict(settings), "mtdnn_options": options,
              **results, **compare(results),
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "transformers": transformers.__version__},
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    suffix = "" if variant == "mtdnn" else variant.removeprefix("mtdnn")
    write_json_file(args.json or out / f"token-references-{args.task}{suffix}.json", report)
    print(table(args.task, results))
    if "f1_difference" in report:
        print(f"F1 difference (mtdnn - reference): {report['f1_difference']:+.2f} points; within "
              f"{TARGET_F1_GAP} F1: {report['within_target']}" + ("" if report["same_carve"] is not False
                                                                    else "; the arms carved DIFFERENT articles"))
    finite = all(math.isfinite(r["f1"]) for r in results.values())
    return 0 if finite and report.get("same_carve") is not False else 1


def summary_main(argv: list[str]) -> int:
    """``summary REPORT.json ... --json OUT``: the seeds of one task, summarized by :func:`summarize`."""
    p = argparse.ArgumentParser(prog="token_references.py summary",
                                description="mean ± sd over seeds of reports written by this script with both arms")
    p.add_argument("reports", nargs="+", help="token-references-<task>.json of each seed")
    p.add_argument("--json", required=True, help="where the summary goes (written atomically)")
    args = p.parse_args(argv)
    try:
        summary = summarize([json.loads(Path(r).read_text(encoding="utf-8")) for r in args.reports])
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary["reports"] = args.reports
    write_json_file(args.json, summary)
    print(summary_table(summary))
    print(f"mean F1 difference (mtdnn - reference): {summary['f1_difference']['mean']:+.2f} points; within "
          f"{TARGET_F1_GAP} F1: {summary['within_target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
