"""Partial-input baselines: train the same recipe on one text column only and compare its dev score with the
majority class and with the full input.

Hypothesis-only NLI (Poliak et al. 2018; Gururangan et al. 2018, arXiv 1803.02324: about 53% on MNLI against
about 35% for the majority class) and warrants-only ARCT (Niven and Kao 2019, section 3: BERT reaches 71% from
the warrants alone) measure how much of a score needs no reasoning over the pair at all.

    task --partial_task(input)--> the same task reading one column (hypothesis, premise) or, for ranking,
    the candidates alone --write YAML, python -m mtdnn.train--> one run per seed --metrics.json--> dev scores
    beside the majority class of train (scored on dev) and the full-input runs of the same seeds

Each run is an ordinary run directory under the output directory (``<variant>-seed<N>``); a complete one is
reused, so an interrupted comparison resumes where it stopped. The dev score of a run is its best epoch's
(the run's own model selection on dev, as ``metrics.json`` reports it); the last epoch's is kept beside it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from ...errors import ConfigError
from ...fileio import dump_yaml, write_atomic, write_json_atomic
from ...tables import markdown_table
from ...tasks.data import load_split
from ...tasks.taskdef import TaskDef
from ...training import trainer
from ...training.config import TrainConfig, overrides_model
from ...training.runs import continue_unfinished, read_metrics
from .outputs import claim_diagnose_dir
from .plots import grouped_bars

INPUTS = ("hypothesis", "premise", "warrants")
FULL = "full"


def partial_task(task: TaskDef, input: str) -> TaskDef:
    """``task`` reading one input only.

    ``hypothesis`` / ``premise``: a two-text classification task keeps its second / first text column.
    ``warrants``: a ranking task keeps no text column, so each candidate (warrant) is scored alone.
    A one-text variant cannot keep a SAN head (it reads premise against hypothesis): see :func:`comparable_task`.

    Raises:
        ConfigError: the input does not fit the task (naming both).
    """
    if input in ("hypothesis", "premise"):
        if not task.kind.classifies or len(task.text) != 2:
            raise ConfigError(f"--input {input}: task '{task.name}' is not a classification task over two texts "
                              f"(type {task.type}, text {task.text}); use --input warrants for a ranking task")
        column = task.text[1] if input == "hypothesis" else task.text[0]
        note = f"{input}-only baseline: reads column '{column}' only"
        return task.model_copy(update={"text": [column], "description": note})
    if input == "warrants":
        if not task.kind.ranks_candidates:
            raise ConfigError(f"--input warrants: task '{task.name}' is not a ranking task (it is {task.type})")
        note = f"candidates-only baseline: scores each of {', '.join(task.candidates or [])} alone"
        return task.model_copy(update={"text": [], "description": note})
    raise ConfigError(f"--input {input!r}: expected one of {', '.join(INPUTS)}")


def comparable_task(task: TaskDef) -> tuple[TaskDef, str | None]:
    """``task`` with a head that both its full and its one-text variants can have, and a note when it changed:
    a SAN head (MT-DNN's answer module, which attends from the hypothesis to the premise) becomes the default
    linear head on the pooled sequence for both, so that the comparison differs in the input alone."""
    if task.head_type != "san":
        return task, None
    head = task.head.model_copy(update={"type": None, "steps": None, "step_dropout": None})
    return task.model_copy(update={"head": head}), (
        f"task '{task.name}' has a SAN head, which needs a text pair: every variant here uses the linear head on "
        "the pooled sequence instead, so that they differ in their input only")


RECIPE_FIELDS = ("encoder", "max_epochs", "batch_size", "lr", "max_length", "limit_train_examples", "accelerator")
"""The :class:`~mtdnn.training.config.TrainConfig` fields a partial-input comparison sets for all its runs."""

Recipe = overrides_model(
    "Recipe", tuple(n for n in TrainConfig.model_fields if n not in RECIPE_FIELDS),
    """The training recipe shared by every run of a comparison: overrides of the
    :class:`~mtdnn.training.config.TrainConfig` fields of :data:`RECIPE_FIELDS` (validated by it).""")


def recipe_config(recipe, task_defs: Path, task: str, data_dir: Path, seed: int, run_dir: Path) -> TrainConfig:
    """The :class:`~mtdnn.training.config.TrainConfig` of one run of ``recipe`` (a :data:`Recipe`)."""
    return TrainConfig(task_defs=str(task_defs), tasks=[task], data_dir=str(data_dir), seed=seed,
                       output_dir=str(run_dir), **recipe.model_dump())


def majority_baseline(task: TaskDef, data_dir: Path) -> dict:
    """Predict train's most frequent label (class, or correct candidate for ranking) for every dev row.

    Returns:
        ``{"label", "train_share", "dev_accuracy", "dev_n"}``; ``label`` is the name (classification) or the
        candidate column (ranking).
    """
    train = Counter(int(ex.label) for ex in load_split(task, "train", data_dir).examples)
    dev = [int(ex.label) for ex in load_split(task, "dev", data_dir).examples]
    best = max(sorted(train), key=lambda label: train[label])
    names = task.kind.output_names(task)
    return {"label": names[best] if names else best, "train_share": train[best] / sum(train.values()),
            "dev_accuracy": sum(y == best for y in dev) / len(dev), "dev_n": len(dev)}


def _task_defs_file(task: TaskDef, path: Path) -> Path:
    body = {k: v for k, v in task.to_plain().items() if k != "name"}
    write_atomic(path, "# written by python -m mtdnn.diagnose partial-input\n"
                 + dump_yaml({"tasks": {task.name: body}}))
    return path


def train_variant(task: TaskDef, variant: str, seed: int, data_dir: Path, output_dir: Path, recipe: Recipe) -> dict:
    """Train (or reuse) ``output_dir/<variant>-seed<seed>`` with the toolkit's trainer (:func:`mtdnn.training.
    trainer.fit` of the recipe's :class:`~mtdnn.training.config.TrainConfig`) and read its dev score.

    Raises:
        ConfigError, DataError: bad settings or data. Interrupted, Diverged: the training stopped.
    """

    run_dir = output_dir / f"{variant}-seed{seed}"
    metrics = read_metrics(run_dir)
    if metrics is None:
        task_defs = _task_defs_file(task, output_dir / f"task_defs-{variant}.yaml")
        config = recipe_config(recipe, task_defs, task.name, data_dir, seed, run_dir)
        metrics = trainer.fit(config, **continue_unfinished(run_dir)).metrics
    metric = task.metric_names[0]
    return {"seed": seed, "run": run_dir.name, "metric": metric, "best_epoch": metrics["best"]["epoch"],
            "dev": metrics["best"]["tasks"][task.name][metric],
            "last_epoch_dev": metrics["epochs"][-1]["tasks"][task.name][metric]}


def _mean_sd(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "values": values}


def partial_input_baselines(task: TaskDef, input: str, seeds: list[int], data_dir: Path, output_dir: Path,
                            recipe: Recipe, full: bool = True) -> dict:
    """Train the ``input``-only variant (and with ``full`` the full input) for each seed; add the majority class.

    Returns:
        JSON-ready ``{"task", "input", "recipe", "seeds", "majority", "head_note" (None, or why every variant
        uses the linear head: :func:`comparable_task`), "variants": {name: {"runs": [...], "dev": {"mean", "sd",
        "values"}}}}``.
    """
    task, head_note = comparable_task(task)
    partial = partial_task(task, input)
    majority = majority_baseline(task, data_dir)

    output_dir = claim_diagnose_dir(output_dir)
    variants = {f"{input}-only": partial}
    if full:
        variants[FULL] = task
    result = {"task": task.name, "input": input, "recipe": recipe.model_dump(), "seeds": seeds, "majority": majority,
              "head_note": head_note, "variants": {}}
    for name, variant_task in variants.items():
        runs = [train_variant(variant_task, name, seed, data_dir, output_dir, recipe) for seed in seeds]
        result["variants"][name] = {"text": variant_task.text, "runs": runs, "dev": _mean_sd([r["dev"] for r in runs])}
    return result


def format_partial_table(result: dict) -> str:
    """Markdown: majority class, then each variant's dev score (mean ± sd over seeds, and each seed)."""
    rows = [[f"majority class of train (`{result['majority']['label']}`)", f"{result['majority']['dev_accuracy']:.3f}",
             "-"]]
    for name, variant in result["variants"].items():
        dev = variant["dev"]
        shown = f"{dev['mean']:.3f}" + (f" ± {dev['sd']:.3f}" if dev["sd"] is not None else "")
        seeds = ", ".join(f"{r['seed']}: {r['dev']:.3f}" for r in variant["runs"])
        rows.append([f"{name} ({', '.join(variant['text']) or 'candidates alone'})", shown, seeds])
    table = "\n".join(markdown_table(["input", "dev accuracy", "seeds"], rows, "lrl")) + "\n"
    return table + (f"\nNote: {result['head_note']}.\n" if result.get("head_note") else "")


def write_partial_outputs(result: dict, output_dir: str | Path, stem: str = "diagnose-partial-input") -> dict[str, Path]:
    """Write ``<stem>.json`` and ``<stem>.png`` (majority, partial and full input; error bars of one sd)."""

    output_dir = claim_diagnose_dir(output_dir)

    output_dir = Path(output_dir)
    groups = ["majority"] + list(result["variants"])
    values = [result["majority"]["dev_accuracy"]] + [v["dev"]["mean"] for v in result["variants"].values()]
    errors = [None] + [v["dev"]["sd"] for v in result["variants"].values()]
    png = grouped_bars(output_dir / f"{stem}.png", groups, {"dev accuracy": values},
                       f"Partial input: {result['task']} ({len(result['seeds'])} seed(s))",
                       errors={"dev accuracy": errors})
    path = output_dir / f"{stem}.json"
    write_json_atomic(path, {**result, "plot": png.name})
    return {"json": path, "png": png}
