"""``python -m mtdnn.evaluate MODEL``: score a trained run or export on labelled splits, with training's metrics.

Example::

    python -m mtdnn.evaluate runs/<run> --tasks rte,mrpc --split dev --data-dir ../shared/data

``MODEL`` is a complete run directory (its best checkpoint, or ``--checkpoint``) or an export directory.
Batches are formed as in training's validation (see :mod:`mtdnn.training.inference`), so the best checkpoint's dev
scores equal those in the run's ``metrics.json``. Prints a table and writes JSON (default
``MODEL/eval-<split>.json``) with the same ``tasks`` and ``average`` fields as ``metrics.json``. The command's
flags are read by :mod:`mtdnn.cli.evaluate`; :func:`evaluate` does the scoring.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..errors import ConfigError, DataError
from ..fileio import prepare_output_path
from ..modeling.scores import float32_digits, rounded_scores
from ..tasks.splits import SplitSpec
from ..tasks.taskdef import TaskDef

log = logging.getLogger("mtdnn.evaluate")


def evaluation_splits(loaded, names: list[str] | None, split: str, data_dir: Path) -> dict:
    """Tokenized, labelled ``split`` of each task, checked before anything is scored.

    Raises:
        ConfigError: a task the model was not trained on.
        DataError: a task without the split, no task with it, or a split without labels.
    """
    # keeps torch out of import time
    from ..tasks.tokenized import tokenized_split

    if names is None:  # every task with the split and with labels (an mlm task has none)
        names = [n for n, t in loaded.tasks.items() if split in t.splits and t.kind.labelled]
        if not names:
            raise DataError(f"{loaded.model_dir}: none of its tasks ({', '.join(loaded.tasks)}) has a split '{split}'")
    splits = {}
    for name in names:
        task = loaded.task(name)
        if not task.kind.labelled:
            raise ConfigError(f"--tasks: task '{name}' is a {task.type} task, which has no labels to evaluate (its "
                              f"dev metrics, {', '.join(task.metric_names)}, are computed during training)")
        tokenized = tokenized_split(task, split, data_dir, loaded.tokenizer, loaded.max_length)
        if tokenized.labels is None:
            spec = task.splits[split]
            source = data_dir / spec.path if spec.path else f"split '{split}'"
            raise DataError(f"{source}: task '{name}', split '{split}' has no labels (no column '{task.label}'); "
                            "evaluate needs a labelled split, use python -m mtdnn.predict for unlabelled ones")
        splits[name] = tokenized
    return splits


FILE_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".json": "squad", ".txt": "conll", ".conll": "conll"}
"""Format by extension, for a ``--file`` of a task whose splits all come from elsewhere (the hub, carves)."""


def check_file(path: str | None) -> Path | None:
    """``--file``: an existing file, checked before any model is loaded.

    Raises:
        DataError: no such file (or a directory).
    """
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        raise DataError(f"--file {path}: no such file" + (" (a directory)" if file.is_dir() else ""))
    return file.resolve()


def with_file_split(task: TaskDef, file: Path, split: str) -> TaskDef:
    """``task`` with one more split, ``split``, read from ``file`` in the task's own format: the parsing settings of
    its first split read from a file (dev, test, train, then any; their format, header, columns, quoting,
    encoding, id column), else the format of ``file``'s extension. The split's path is the file's name: read it with
    the file's directory as the data root.

    Raises:
        ConfigError: the split settings do not validate (naming the file and task).
    """
    order = [s for s in ("dev", "test", "train") if s in task.splits] + list(task.splits)
    template = next((task.splits[s] for s in order if task.splits[s].path), None)
    fields = (template.model_dump(exclude={"path", "hub", "carve", "folds"}, exclude_unset=True)
              if template is not None else {"format": FILE_FORMATS.get(file.suffix.lower(), "tsv")})
    try:
        spec = SplitSpec.model_validate({**fields, "path": file.name})
    except ValueError as err:
        raise ConfigError(f"--file {file}: task '{task.name}': {err}") from None
    return task.model_copy(update={"splits": {**task.splits, split: spec}})


def check_output_path(output: str | None) -> None:
    """Refuse an ``--output`` that cannot become a JSON file, before any model is loaded or scored.

    Raises:
        ConfigError: the path is an existing directory, or its parent is not an existing directory.
        UserError: the directory cannot be written in (:func:`mtdnn.fileio.prepare_output_path`).
    """
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise ConfigError(f"--output {output}: is a directory; give the JSON file to write, e.g. {path / 'eval.json'}")
    if not path.parent.is_dir():
        raise ConfigError(f"--output {output}: directory {path.parent} does not exist")
    prepare_output_path(path, "--output")


def format_table(scores: dict[str, dict[str, float]], examples: dict[str, int], split: str, average: float,
                 metric_names: dict[str, list[str]]) -> str:
    """A plain-text table: one row per task with its metrics in the task definition's order, the averaged one
    (the task's first metric) first and marked ``*``; then the average."""
    lines = [f"{'task':<12} {'split':<8} {'examples':>8}  metrics (* = averaged)"]
    for name, task_scores in scores.items():
        order = [m for m in metric_names[name] if m in task_scores] + [m for m in task_scores
                                                                        if m not in metric_names[name]]
        shown = "  ".join(f"{'*' if i == 0 else ''}{m} {task_scores[m]:.4f}" for i, m in enumerate(order))
        lines.append(f"{name:<12} {split:<8} {examples[name]:>8}  {shown}")
    lines.append(f"average of the * metrics: {average:.4f}")
    return "\n".join(lines)


def evaluate(loaded, names: list[str] | None = None, split: str = "dev", data_dir: str | Path | None = None,
             batch_size: int | None = None, device: str = "auto") -> dict:
    """Score a loaded model (:func:`mtdnn.training.inference.load_model`) on a labelled split of its tasks.

    Args:
        names: the tasks (default: every task of the model that has ``split``).
        data_dir: the data root (default: the run's, else ``$MTDNN_DATA_DIR``, else ``../shared/data``).
        batch_size: examples per batch (default: the run's eval batch size).

    Returns:
        ``{"split", "data_dir", "tasks": {task: {metric: value}}, "examples": {task: n}, "average"}``, the same
        ``tasks`` and ``average`` as a run's ``metrics.json`` (to float32's 7 digits,
        :func:`mtdnn.modeling.metrics.float32_digits`).

    Raises:
        ConfigError, DataError: see :func:`evaluation_splits`.
    """
    # keeps torch out of import time
    from ..modeling.metrics import attach_split, average_score, build_metrics, compute_metrics
    from ..training.inference import predict_outputs, resolve_device

    root = loaded.resolve_data_dir(None if data_dir is None else str(data_dir))
    splits = evaluation_splits(loaded, names, split, root)
    device = resolve_device(device)
    if loaded.limit_eval_examples and split == "dev":
        log.warning("the run was trained with --limit-eval-examples %d: its metrics.json scored that many dev "
                    "examples per task; this scores the whole split, so the numbers differ", loaded.limit_eval_examples)
    model = loaded.model.to(device)
    pad_id = loaded.tokenizer.pad_token_id or 0
    scores, examples = {}, {}
    for name, tokenized in splits.items():
        task = loaded.tasks[name]
        metrics = attach_split(build_metrics(task).to(device), tokenized)
        predict_outputs(model, task, tokenized, pad_id, batch_size or loaded.eval_batch_size,
                        loaded.pad_to_multiple_of, metrics=metrics, device=device, progress=f"{name} {split}")
        scores[name], examples[name] = compute_metrics(metrics), tokenized.num_examples
    average = average_score(scores, {n: loaded.tasks[n].metric_names for n in scores})
    # written as metrics.json writes them: to float32's digits, the average from the unrounded scores
    return {"split": split, "data_dir": str(root), "tasks": rounded_scores(scores), "examples": examples,
            "average": float32_digits(average)}
