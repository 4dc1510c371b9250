"""``python -m mtdnn.transfer``: few-shot transfer, fine-tuning encoders on seeded subsets (arXiv 1901.11504, 4.4).

Example::

    python -m mtdnn.transfer --task snli --encoders packaged-minilm,runs/<mt-run> --sizes 200,549 --seeds 3 \\
        --data-dir ../shared/data --output-dir runs/transfer-snli

MT-DNN's domain-adaptation experiment fine-tunes each encoder on 0.1%, 1%, 10% and 100% of a task's training
data and compares accuracy. Here, for every seed, the task's training pool is put in one stratified order
(:mod:`mtdnn.tasks.subsets`) and each subset is a prefix of it: smaller subsets lie inside larger ones, and all
encoders see the same subsets. Every (encoder, size, seed) fine-tunes a fresh copy of the encoder with a fresh
task head (or, with ``--reuse-head``, a run's head for the same labels) under one set of hyper-parameters,
:class:`TransferSettings`, then scores the full evaluation split once, after the last epoch: there is no model
selection on the set being reported.

The output directory receives, at the end and atomically: ``results.json`` (per encoder and size: examples,
accuracy per seed, mean and sample standard deviation, null for one seed), ``results.md`` (the same as a
Markdown table, with the set-up) and ``learning_curve.png`` (accuracy against training examples, log x axis,
one line per encoder, error bars of one standard deviation). Each finished (encoder, size, seed) is also kept
in ``per_run/`` (with the ids of the pool examples it trained on), so an interrupted sweep resumes where it
stopped when the same command is run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError, DataError, run_cli
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks

log = logging.getLogger("mtdnn.transfer")

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
CURVE_PNG = "learning_curve.png"
PER_RUN_DIR = "per_run"


@dataclass(frozen=True)
class TransferSettings:
    """The fine-tuning hyper-parameters: one place, the same for every encoder, size and seed, and reported.

    MT-DNN's fine-tuning settings (arXiv 1901.11504, section 4): 3 epochs, AdamW with lr 5e-5, linear warm-up
    over 10% of the steps then linear decay; batch 8 for the small subsets, 32 above. The rule used here: a
    subset of fewer than ``small_subset_limit`` (1000) examples trains with batch 8, a larger one with 32.
    The training seed of seed index s is s (head initialisation, dropout and batch order); subset orders use
    the same s in their own generator.
    """

    epochs: int = 3
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    gradient_clip: float = 1.0
    small_batch_size: int = 8
    large_batch_size: int = 32
    small_subset_limit: int = 1000
    eval_batch_size: int = 128

    def batch_size(self, n_examples: int) -> int:
        """The training batch for a subset of ``n_examples``."""
        return self.small_batch_size if n_examples < self.small_subset_limit else self.large_batch_size

    @property
    def batch_size_rule(self) -> str:
        return (f"batch {self.small_batch_size} when the subset has fewer than {self.small_subset_limit} examples, "
                f"else {self.large_batch_size}")

    def describe(self) -> str:
        lr = f"{self.lr:.0e}".replace("e-0", "e-")
        return (f"{self.epochs} epochs, AdamW lr {lr} (weight decay {self.weight_decay:g}, none on biases and "
                f"LayerNorm), linear warm-up over {self.warmup_ratio:.0%} of the steps then linear decay, "
                f"{self.batch_size_rule}, gradient clipping {self.gradient_clip:g}")


SETTINGS = TransferSettings()


# ----------------------------------------------------------------------------------------------- encoders


@dataclass
class Encoder:
    """One encoder of the comparison.

    ``kind``: ``packaged`` (the embedded MiniLM), ``huggingface`` (a name or path ``AutoModel`` loads) or ``run``
    (a multi-task or student run of this toolkit, or its export: its encoder, with a fresh head unless
    ``head_state`` holds a reused one). ``path`` is what :func:`mtdnn.modeling.model.load_encoder` receives.
    """

    label: str
    spec: str
    kind: str
    path: str
    export: Path | None = None
    trained_on: dict[str, dict] = field(default_factory=dict)
    head_from: str | None = None
    head_state: dict | None = None

    @property
    def head(self) -> str:
        if self.head_from:
            return f"reused: the run's '{self.head_from}' head"
        return "fresh"

    def fingerprint(self) -> str:
        """Identifies the weights for the per-run cache: the name, or the size and time of a directory's files."""
        path = Path(self.path) if self.kind != "packaged" else Path(_packaged_path())
        if not path.is_dir():
            return self.path
        stats = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(path.iterdir()) if p.is_file()]
        return hashlib.sha256("|".join(stats).encode()).hexdigest()[:16]


def _packaged_path() -> str:
    from ..modeling.model import PACKAGED_MINILM, resolve_encoder

    return resolve_encoder(PACKAGED_MINILM)


def parse_encoder_list(text: str) -> list[tuple[str, str]]:
    """``[label=]spec,...`` as ``[(label, spec)]``; the label defaults to the name, or a run's directory name.

    Raises:
        ConfigError: an empty list or two encoders with the same label.
    """
    pairs = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        label, spec = item.split("=", 1) if "=" in item else ("", item)
        if not label:
            path = Path(spec)
            label = spec if not path.exists() else (path.resolve().parent.name if path.resolve().name == "export"
                                                    else path.resolve().name)
        pairs.append((label, spec))
    if not pairs:
        raise ConfigError("--encoders: give at least one encoder (packaged-minilm, a Hugging Face name or path, "
                          "or a run directory)")
    names = [_safe_name(label) for label, _ in pairs]  # labels also name per_run/ directories
    duplicated = sorted({label for label, name in zip([p[0] for p in pairs], names) if names.count(name) > 1})
    if duplicated:
        raise ConfigError(f"--encoders: label {duplicated[0]!r} is used twice (or differs from another only in "
                          "characters a directory name cannot hold); name them as label=spec")
    return pairs


def _is_run_like(path: Path) -> bool:
    from ..training.export import is_export_dir

    return path.is_dir() and (is_export_dir(path) or any((path / name).exists()
                                                          for name in ("export", "metrics.json", "checkpoints")))


def reused_head_state(export: Path, source_task: str, task: TaskDef) -> dict:
    """The weights of the export's ``source_task`` head, to initialise ``task``'s head.

    Raises:
        CheckpointError: the export has no such head, or it was trained for another task type, other labels
            (or another order of them) or another pooling.
    """
    from safetensors.torch import load_file

    from ..training.export import load_export_tasks

    saved = load_export_tasks(export)
    old = saved.get(source_task)
    if old is None:
        raise CheckpointError(f"{export}: --reuse-head {source_task}: the run has no head for task '{source_task}' "
                              f"(its heads: {', '.join(saved)})")
    problems = []
    if old.type != task.type:
        problems.append(f"type {old.type} vs {task.type}")
    if old.labels != task.labels:
        problems.append(f"labels {old.labels} vs {task.labels}")
    if old.head.pooling != task.head.pooling:
        problems.append(f"pooling {old.head.pooling} vs {task.head.pooling}")
    if problems:
        raise CheckpointError(f"{export}: --reuse-head {source_task}: the run's '{source_task}' head does not fit "
                              f"task '{task.name}' ({'; '.join(problems)}); a head is reused only for the same type, "
                              "the same labels in the same order and the same pooling")
    state = load_file(str(export / "heads.safetensors"))
    prefix = source_task + "."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def resolve_encoder_spec(label: str, spec: str, task: TaskDef, reuse_head: str | None,
                         trust_remote_code: bool = False) -> Encoder:
    """Turn one ``--encoders`` item into an :class:`Encoder`, and check that it loads and fits the task.

    The encoder is built once here (and discarded), so that a wrong name, a run without an export, an encoder
    without the pooler the task's head asks for, or a reused head that does not fit fail before any training.

    Raises:
        ConfigError: the encoder or its tokenizer cannot be loaded, or does not fit the task's head.
        CheckpointError: a run directory that is incomplete, or a reused head that does not fit.
    """
    from ..training.export import load_export_tasks, resolve_export
    from ..modeling.model import PACKAGED_MINILM, MultiTaskModel, load_encoder, load_tokenizer

    path = Path(spec)
    if spec == PACKAGED_MINILM:
        encoder = Encoder(label, spec, "packaged", spec)
    elif _is_run_like(path):
        export = resolve_export(path)
        tasks = load_export_tasks(export)
        trained_on = {name: {"train": t.splits["train"].path if "train" in t.splits else None,
                             "description": t.description} for name, t in tasks.items()}
        encoder = Encoder(label, spec, "run", str(export / "encoder"), export=export, trained_on=trained_on)
        if reuse_head:
            encoder.head_from = reuse_head
            encoder.head_state = reused_head_state(export, reuse_head, task)
    else:
        encoder = Encoder(label, spec, "huggingface", spec)
    try:
        load_tokenizer(encoder.path, trust_remote_code)
        model = MultiTaskModel(load_encoder(encoder.path, trust_remote_code), {task.name: task})
    except ConfigError as err:
        raise ConfigError(f"--encoders {label}: {err}") from None
    if encoder.head_state is not None:
        try:
            model.heads[task.name].load_state_dict(encoder.head_state)
        except RuntimeError as err:
            raise CheckpointError(f"{encoder.export}: --reuse-head {reuse_head}: the head's weights do not fit "
                                  f"this encoder ({err})") from None
    return encoder


# ----------------------------------------------------------------------------------------------- one run


def fine_tune(encoder: Encoder, task: TaskDef, train_set, tokenizer, settings: TransferSettings, seed: int,
              accelerator: str = "auto", precision: str = "32-true", root_dir: Path | None = None,
              trust_remote_code: bool = False):
    """Fine-tune a fresh copy of ``encoder`` (and a fresh or reused head) on ``train_set``; no validation.

    Uses the toolkit's :class:`~mtdnn.training.lightning.MultiTaskModule` with one task and a Lightning Trainer on one
    device. Returns ``(module, trainer)``; the module is back on CPU (Lightning's teardown).
    """
    import pytorch_lightning as pl

    from ..training.lightning import MultiTaskDataModule, MultiTaskModule
    from ..tasks.schedule import MultiTaskBatchSampler, TaskSize

    class SubsetDataModule(MultiTaskDataModule):
        """One task's training subset, already tokenized; no dev loader (the evaluation comes after training)."""

        def prepare_data(self) -> None:
            pass

        def setup(self, stage: str | None = None) -> None:
            self.train_sets, self.dev_sets = [train_set], {}
            self.train_sampler = MultiTaskBatchSampler([TaskSize(train_set.lengths)], self.batch_size,
                                                       seed=self.seed)
            self._rank, self._world = 0, 1

        def val_dataloader(self) -> list:
            return []

    pl.seed_everything(seed, workers=True, verbose=False)
    module = MultiTaskModule(encoder.path, {task.name: task.to_plain()}, dev_tasks=[], lr=settings.lr,
                             weight_decay=settings.weight_decay, warmup_ratio=settings.warmup_ratio,
                             trust_remote_code=trust_remote_code)
    if encoder.head_state is not None:
        module.model.heads[task.name].load_state_dict(encoder.head_state)
    datamodule = SubsetDataModule({task.name: task}, data_dir=None, tokenizer=tokenizer,
                                  batch_size=settings.batch_size(len(train_set)), seed=seed)
    trainer = pl.Trainer(max_epochs=settings.epochs, accelerator=accelerator, devices=1, precision=precision,
                         gradient_clip_val=settings.gradient_clip or None, limit_val_batches=0,
                         num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                         default_root_dir=root_dir, deterministic=False)
    trainer.fit(module, datamodule=datamodule)
    return module, trainer


@torch.inference_mode()
def evaluate_split(model, task: TaskDef, split, pad_token_id: int, batch_size: int,
                   device: torch.device | str = "cpu") -> dict[str, float]:
    """Score ``model`` on every row of a labelled ``split`` once: ``{metric: value}`` of the task's metrics.

    The batching and metric updates of :func:`mtdnn.training.inference.predict_outputs` (length-sorted batches, as
    training's validation does).
    """
    from ..training.inference import predict_outputs
    from ..modeling.metrics import build_metrics, compute_metrics

    model.eval().to(device)
    metrics = build_metrics(task).to(device)
    predict_outputs(model, task, split, pad_token_id, batch_size, metrics=metrics, device=device)
    return compute_metrics(metrics)


# ----------------------------------------------------------------------------------------------- the report


def summarise(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _pct(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def render_markdown(report: dict) -> str:
    """``results.md``: the table of mean ± standard deviation (percent) per encoder and size, then the set-up."""
    metric, seeds = report["metric"], report["seeds"]
    pool, evaluation = report["pool"], report["evaluation"]
    sizes = report["sizes"]
    lines = [f"# Few-shot transfer: {report['task']}", ""]
    spread = (f"mean ± sample standard deviation over {len(seeds)} seeds ({', '.join(map(str, seeds))})"
              if len(seeds) > 1 else f"one seed ({seeds[0]}), so no standard deviation")
    lines.append(f"{metric.capitalize()} (%) on the `{evaluation['split']}` split ({evaluation['examples']} examples), "
                 f"after fine-tuning on n examples of the `{pool['split']}` split ({pool['examples']} examples); "
                 f"{spread}.")
    lines += ["", "| encoder | " + " | ".join(f"n = {s['n_examples']} ({100 * s['fraction_of_pool']:.3g}% of pool)"
                                              for s in sizes) + " |",
              "|---|" + "---:|" * len(sizes)]
    for enc in report["encoders"]:
        cells = []
        for row in report["results"][enc["label"]]:
            cells.append(_pct(row["mean"]) + (f" ± {_pct(row['std'])}" if row["std"] is not None else ""))
        lines.append(f"| {enc['label']} | " + " | ".join(cells) + " |")
    lines += ["", "## Set-up", ""]
    lines.append(f"- Task `{report['task']}` from `{report['task_defs']}`"
                 + (f": {report['description']}" if report.get("description") else "."))
    counts = ", ".join(f"{k} {v}" for k, v in pool["class_counts"].items())
    lines.append(f"- Pool (training subsets are drawn from it): split `{pool['split']}`, `{pool['source']}`, "
                 f"{pool['examples']} examples ({counts}).")
    lines.append(f"- Evaluation: split `{evaluation['split']}`, `{evaluation['source']}`, {evaluation['examples']} "
                 "examples, scored once after the last epoch (no model selection on it).")
    lines.append("- Subsets: one stratified order of the pool per seed; every subset is a prefix of it, so smaller "
                 "subsets lie inside larger ones and every encoder sees the same examples. Fractions are of the pool.")
    lines.append(f"- Hyper-parameters, the same for every encoder: {report['settings']['description']}; max length "
                 f"{report['max_length']} tokens; training seed = seed index.")
    lines += ["", "| encoder | kind | source | head | trained on |", "|---|---|---|---|---|"]
    for enc in report["encoders"]:
        trained = ", ".join(f"{name} (`{info['train']}`)" if info.get("train") else name
                            for name, info in enc["trained_on"].items()) or "-"
        lines.append(f"| {enc['label']} | {enc['kind']} | `{enc['spec']}` | {enc['head']} | {trained} |")
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"]]
    lines += ["", f"## {metric.capitalize()} per seed (%)", "",
              "| encoder | n | " + " | ".join(f"seed {s}" for s in seeds) + " | train s (mean) |",
              "|---|---:|" + "---:|" * (len(seeds) + 1)]
    for enc in report["encoders"]:
        for row in report["results"][enc["label"]]:
            lines.append(f"| {enc['label']} | {row['n_examples']} | " + " | ".join(_pct(v) for v in row["accuracies"])
                         + f" | {statistics.fmean(row['train_seconds']):.0f} |")
    return "\n".join(lines) + "\n"


def plot_learning_curve(report: dict, path: Path) -> None:
    """``learning_curve.png``: accuracy (%) against training examples, log x, one line per encoder.

    Error bars are one sample standard deviation over seeds, drawn only when there is one (two or more seeds).
    Written to a temporary file beside ``path`` and renamed into place.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    count = len(report["encoders"])
    for i, enc in enumerate(report["encoders"]):
        rows = report["results"][enc["label"]]
        dodge = 1.025 ** (i - (count - 1) / 2)  # side by side on the log axis, so error bars do not overlap
        xs = [r["n_examples"] * dodge for r in rows]
        ys = [100 * r["mean"] for r in rows]
        errors = None if any(r["std"] is None for r in rows) else [100 * r["std"] for r in rows]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3 if errors else 0, label=enc["label"])
    sizes = [s["n_examples"] for s in report["sizes"]]
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel(f"training examples from the {report['pool']['split']} pool (log scale)")
    ax.set_ylabel(f"{report['metric']} on {report['evaluation']['split']} (%)")
    seeds = len(report["seeds"])
    ax.set_title(f"{report['task']}: few-shot transfer ({seeds} seed{'s' if seeds > 1 else ''}"
                 + (", ±1 s.d." if seeds > 1 else "") + ")")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)


def build_report(task: TaskDef, args, settings: TransferSettings, encoders: list[Encoder], records: dict,
                 seeds: list[int], sizes: list[int], origin: dict[int, str], pool_raw, eval_raw, eval_examples: int,
                 metric: str) -> dict:
    """The content of ``results.json`` (and, rendered, of ``results.md`` and the plot).

    ``records[label][size][seed]`` are the per-run records (``metrics``, ``train_seconds``, ...); ``pool_raw``
    and ``eval_raw`` the parsed pool and evaluation splits (:class:`mtdnn.tasks.data.RawSplit`), of which the first
    ``eval_examples`` were scored; ``origin`` says how each size was asked for.
    """
    pool_split, eval_split = pool_raw.split, eval_raw.split
    pool_labels = [int(ex.label) for ex in pool_raw.examples]
    pool_size = len(pool_labels)
    class_counts = {task.labels[c]: pool_labels.count(c) for c in sorted(set(pool_labels))}
    notes = []
    if "train" not in task.splits:
        notes.append(f"Task '{task.name}' has no train split here: the pool is its '{pool_split}' split "
                     f"({pool_size} examples) and the evaluation set its '{eval_split}' split.")
    missing = [name for name in task.labels if name not in class_counts]
    if missing:
        notes.append(f"The pool holds no example of {', '.join(missing)}.")
    if task.drop_labels:
        notes.append(f"Rows whose gold label is one of {task.drop_labels} (no gold label) are removed, as is standard: "
                     f"{pool_raw.dropped} from the pool's file, {eval_raw.dropped} from the evaluation file.")
    if eval_examples < len(eval_raw.examples):
        notes.append(f"SMOKE TEST: only the first {eval_examples} of the {len(eval_raw.examples)} evaluation examples "
                     "were scored (--limit-eval-examples).")
    notes.extend(args.note)
    results = {}
    for encoder in encoders:
        rows = []
        for k in sizes:
            per_seed = [records[encoder.label][k][s] for s in seeds]
            values = [r["metrics"][metric] for r in per_seed]
            mean, std = summarise(values)
            rows.append({"n_examples": k, "fraction_of_pool": k / pool_size, "batch_size": settings.batch_size(k),
                         "accuracies": values, "mean": mean, "std": std,
                         "train_seconds": [r["train_seconds"] for r in per_seed],
                         "eval_seconds": [r["eval_seconds"] for r in per_seed]})
        results[encoder.label] = rows
    report = {
        "command": "transfer", "task": task.name, "task_defs": str(args.task_defs), "description": task.description,
        "metric": metric, "seeds": seeds,
        "sizes": [{"n_examples": k, "fraction_of_pool": k / pool_size, "asked_as": origin[k]} for k in sizes],
        "pool": {"split": pool_split, "source": pool_raw.source, "examples": pool_size, "class_counts": class_counts,
                 "dropped_rows": pool_raw.dropped},
        "evaluation": {"split": eval_split, "source": eval_raw.source, "examples": eval_examples,
                       "split_examples": len(eval_raw.examples), "dropped_rows": eval_raw.dropped},
        "settings": {**asdict(settings), "batch_size_rule": settings.batch_size_rule,
                     "description": settings.describe(), "training_seed": "the seed index"},
        "max_length": task.max_length,
        "encoders": [{"label": e.label, "spec": e.spec, "kind": e.kind, "path": e.path, "head": e.head,
                      "trained_on": e.trained_on} for e in encoders],
        "results": results, "notes": notes,
        "args": {k: v for k, v in vars(args).items()},
    }
    return report


# ----------------------------------------------------------------------------------------------- the command


def fraction_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions in (0, 1] (got {text!r})") from None
    bad = [v for v in values if not 0 < v <= 1]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"a fraction must be in (0, 1] (got {bad[0] if bad else text!r})")
    return values


def size_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers (got {text!r})") from None
    bad = [v for v in values if v <= 0]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"a size must be a positive number of examples "
                                         f"(got {bad[0] if bad else text!r})")
    return values


def build_parser() -> argparse.ArgumentParser:
    from ..training.trainer import positive_int

    p = argparse.ArgumentParser(prog="python -m mtdnn.transfer", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", required=True, help="the target task (a classification task), e.g. snli or scitail")
    p.add_argument("--task-defs", default="task_defs/glue.yaml", help="task-definition YAML holding --task")
    p.add_argument("--encoders", required=True,
                   help="comma-separated [label=]encoder: packaged-minilm, a Hugging Face name or path, or a run "
                        "directory (or export) of mtdnn.train / mtdnn.distill, whose encoder gets a fresh head")
    p.add_argument("--sizes", type=size_list, default=None, help="subset sizes in examples, e.g. 50,200,549,1666")
    p.add_argument("--fractions", type=fraction_list, default=None,
                   help="subset sizes as fractions of the pool, in (0, 1]: size = round(f * pool)")
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1: subset order and training seed")
    p.add_argument("--data-dir", default=None,
                   help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--output-dir", default=None, help="where results go (default: runs/transfer-<task>)")
    p.add_argument("--pool-split", default=None,
                   help="split the subsets are drawn from (default: train, or dev when the task has no train)")
    p.add_argument("--eval-split", default=None,
                   help="split scored once after training (default: dev when the pool is train, else test)")
    p.add_argument("--reuse-head", nargs="?", const="", default=None, metavar="TASK",
                   help="for run encoders, start from the run's head of TASK (default: --task) instead of a fresh "
                        "one; its labels must be the same, in the same order")
    p.add_argument("--limit-eval-examples", type=positive_int, default=None, metavar="N",
                   help="score only the first N examples of the evaluation split (smoke tests; reported)")
    p.add_argument("--note", action="append", default=[], help="a line added to the report's notes (repeatable)")
    p.add_argument("--fresh", action="store_true", help="ignore finished runs kept in OUTPUT_DIR/per_run/")
    p.add_argument("--accelerator", default="auto", help="cpu, gpu, cuda, mps or auto (one device)")
    p.add_argument("--precision", default="32-true", help="32-true (default), bf16-mixed or 16-mixed (GPU)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow encoders with custom code from the hub (off by default)")
    return p


def choose_splits(task: TaskDef, pool_split: str | None, eval_split: str | None) -> tuple[str, str]:
    """The pool split (train, else dev) and the evaluation split (dev when the pool is train, else test).

    Raises:
        ConfigError: a split the task does not define, or the same split for both.
    """
    pool = pool_split or ("train" if "train" in task.splits else "dev")
    evaluation = eval_split or ("dev" if pool == "train" else "test")
    for flag, split in (("--pool-split", pool), ("--eval-split", evaluation)):
        if split not in task.splits:
            raise ConfigError(f"{flag}: task '{task.name}' has no split '{split}' (splits: {', '.join(task.splits)})")
    if pool == evaluation:
        raise ConfigError(f"--pool-split and --eval-split are both '{pool}': the evaluation set must not be trained on")
    return pool, evaluation


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "encoder"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _read_cached(path: Path, key: dict) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("key") == key else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning.pytorch",
                 "lightning.pytorch.utilities.rank_zero", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)  # one Trainer per run: its banner each time is noise
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*predefined batch sampler.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # from Lightning's internals, once per Trainer

    from ..tasks.data import load_split, resolve_data_dir, tokenized_split
    from ..modeling.model import load_tokenizer
    from ..training.runs import write_atomic, write_json_atomic
    from ..tasks.subsets import check_sizes, sizes_from_fractions, stratified_order
    from ..training.trainer import check_lightning_flags

    settings = SETTINGS

    # 1. Validate everything that can be wrong before training anything.
    check_lightning_flags(accelerator=args.accelerator, precision=args.precision, devices=1)  # one device per run
    task = select_tasks(load_task_defs(args.task_defs), [args.task], args.task_defs)[args.task]
    if task.type != "classification":
        raise ConfigError(f"--task {task.name}: few-shot transfer needs a classification task (stratified subsets, "
                          f"accuracy); '{task.name}' is a {task.type} task")
    if args.sizes is None and args.fractions is None:
        raise ConfigError("give --sizes (examples) or --fractions (of the pool), or both")
    pool_split, eval_split = choose_splits(task, args.pool_split, args.eval_split)
    data_dir = resolve_data_dir(args.data_dir)
    pool_raw = load_split(task, pool_split, data_dir)
    eval_raw = load_split(task, eval_split, data_dir)
    if not eval_raw.labelled:
        raise DataError(f"{eval_raw.source}: task '{task.name}', split '{eval_split}' has no labels to score")
    pool_labels = [int(ex.label) for ex in pool_raw.examples]
    pool_size, num_classes = len(pool_labels), len(set(pool_labels))
    origin: dict[int, str] = {}
    for k in args.sizes or []:
        origin.setdefault(k, f"--sizes {k}")
    for f, k in zip(args.fractions or [], sizes_from_fractions(args.fractions or [], pool_size)):
        origin.setdefault(k, f"--fractions {f:g} (round({f:g} x {pool_size}))")
    sizes = sorted(origin)
    check_sizes(sizes, pool_size, num_classes, origin)
    reuse = (args.reuse_head or task.name) if args.reuse_head is not None else None
    encoders = [resolve_encoder_spec(label, spec, task, reuse, args.trust_remote_code)
                for label, spec in parse_encoder_list(args.encoders)]
    if reuse is not None:
        if not any(e.kind == "run" for e in encoders):
            raise ConfigError(f"--reuse-head {reuse}: none of the encoders is a run of this toolkit, so there is no "
                              "head to reuse (drop the flag, or list a run directory in --encoders)")
        for e in encoders:
            if e.kind != "run":
                log.warning("--reuse-head: %s is not a run of this toolkit; it starts from a fresh head", e.label)
    seeds = list(range(args.seeds))
    orders = {seed: stratified_order(pool_labels, seed) for seed in seeds}
    out_dir = Path(args.output_dir) if args.output_dir else Path("runs") / f"transfer-{task.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    eval_examples = min(len(eval_raw.examples), args.limit_eval_examples or len(eval_raw.examples))

    metric = "accuracy" if "accuracy" in task.metric_names else task.metric_names[0]

    # 2. Fine-tune and score every (encoder, size, seed); finished runs are kept in per_run/ for resuming.
    records: dict[str, dict[int, dict[int, dict]]] = {}
    total, done = len(encoders) * len(sizes) * len(seeds), 0
    sigint = signal.getsignal(signal.SIGINT)
    try:
        for encoder in encoders:
            tokenizer = load_tokenizer(encoder.path, args.trust_remote_code)
            pool_set = tokenized_split(task, pool_split, data_dir, tokenizer)
            eval_set = tokenized_split(task, eval_split, data_dir, tokenizer).head(eval_examples)
            records[encoder.label] = {}
            for k in sizes:
                records[encoder.label][k] = {}
                for seed in seeds:
                    done += 1
                    positions = orders[seed][:k]
                    key = {"task": task.to_plain(), "pool_split": pool_split, "eval_split": eval_split,
                           "eval_examples": eval_examples, "n_examples": k, "seed": seed,
                           "subset": _digest(positions), "settings": asdict(settings),
                           "encoder": {"path": encoder.path, "weights": encoder.fingerprint(),
                                       "head_from": encoder.head_from},
                           "accelerator": args.accelerator, "precision": args.precision}
                    cache = out_dir / PER_RUN_DIR / _safe_name(encoder.label) / f"n{k}-seed{seed}.json"
                    record = None if args.fresh else _read_cached(cache, key)
                    if record is None:
                        start = time.perf_counter()
                        module, trainer = fine_tune(encoder, task, pool_set.subset(positions), tokenizer, settings,
                                                    seed, args.accelerator, args.precision, out_dir,
                                                    args.trust_remote_code)
                        if trainer.interrupted:
                            raise KeyboardInterrupt
                        trained = time.perf_counter()
                        scores = evaluate_split(module.model, task, eval_set, tokenizer.pad_token_id or 0,
                                                settings.eval_batch_size, trainer.strategy.root_device)
                        record = {"key": key, "metrics": scores, "steps": int(trainer.global_step),
                                  "example_ids": [pool_set.ids[i] for i in positions],
                                  "train_seconds": round(trained - start, 2),
                                  "eval_seconds": round(time.perf_counter() - trained, 2)}
                        write_json_atomic(cache, record)
                        del module, trainer
                        status = f"train {record['train_seconds']:.0f} s, eval {record['eval_seconds']:.0f} s"
                    else:
                        status = "kept from an earlier run"
                    records[encoder.label][k][seed] = record
                    print(f"[{done}/{total}] {encoder.label} n={k} seed {seed}: {metric} "
                          f"{record['metrics'][metric]:.4f} ({status})", flush=True)
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, SystemExit) and err.code not in (None, 0, 1):
            raise
        print(f"interrupted: finished runs are kept in {out_dir / PER_RUN_DIR}; run the same command again to "
              "resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt

    # 3. The report: learning_curve.png, results.md and, last, results.json, each written atomically.
    report = build_report(task, args, settings, encoders, records, seeds, sizes, origin, pool_raw, eval_raw,
                          eval_examples, metric)
    plot_learning_curve(report, out_dir / CURVE_PNG)
    write_atomic(out_dir / RESULTS_MD, render_markdown(report))
    write_json_atomic(out_dir / RESULTS_JSON, report)
    print(render_markdown(report).split("\n## ")[0])
    print(f"results: {out_dir / RESULTS_JSON}, {out_dir / RESULTS_MD}, {out_dir / CURVE_PNG}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-transfer``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
