"""Adversarial ARCT (Niven and Kao 2019, "Probing Neural Network Comprehension of Natural Language Arguments",
arXiv 1907.07355, section 4): score a run on original rows and on their claim-negated copies.

    adversarial dev file --load_split--> examples --pair_adversarial--> (original, negated) position pairs
    run --score--> chosen warrant per row --arct_diagnosis--> accuracy on the originals, on the negated rows,
    the share of pairs with both right, and on the whole adversarial dev beside chance (0.5)

A negated row keeps both warrants, negates the claim and flips the label; its id is the original's plus
``-adversarial``. A model that picks a warrant from cues in the warrants alone (the word "not", section 3) gives
the same answer to both rows of a pair and so gets at most one of them right: the both-right share is the
figure a cue-reader cannot raise. (i) A run trained on the original data is read on the originals, on the
negated rows and on both-right; (ii) a run trained on the adversarial train set is read on the whole
adversarial dev set, beside chance: Niven and Kao report BERT at 0.53 there (their Table 4).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError, DataError
from ...fileio import write_json_atomic
from ...tasks.data import RawSplit, load_split
from ...tasks.taskdef import SplitSpec, TaskDef
from ...tasks.tokenized import tokenize_examples
from ...training.inference import predict_outputs
from .outputs import claim_diagnose_dir
from .plots import grouped_bars

ADVERSARIAL_SUFFIX = "-adversarial"
DEFAULT_ADVERSARIAL_DEV = "arct_adversarial/dev-adv-negated.csv"
CHANCE = 0.5


def adversarial_task(task: TaskDef, path: str) -> TaskDef:
    """``task`` with one split, ``adversarial``, read from ``path`` (relative to the data root, or absolute):
    tab-separated with CSV quoting, ids from its ``#id`` column.

    Raises:
        ConfigError: ``task`` is not a ranking task over two candidates.
    """
    if not task.kind.ranks_candidates or task.num_candidates != 2:
        raise ConfigError(f"task '{task.name}': adversarial ARCT needs a ranking task over two warrants (it is "
                          f"{task.type} with {task.num_candidates} candidates)")
    spec = SplitSpec(path=path, id="#id", quoting="csv")
    return task.model_copy(update={"splits": {"adversarial": spec}})


def load_adversarial(task: TaskDef, path: str, data_dir: Path) -> RawSplit:
    """The adversarial rows of ``path`` parsed with ``task``'s columns (see :func:`adversarial_task`).

    ``path`` is the ``--adversarial`` flag's: relative to the data root, or any path given on the command line
    (task definitions keep their splits inside the root; a flag names a file the user chose).

    Raises:
        DataError: the file is missing, lacks a column, or has a malformed row.
    """
    given = Path(path)
    if given.is_absolute() or ".." in given.parts:
        data_dir, path = given.resolve().parent, given.name
    return load_split(adversarial_task(task, path), "adversarial", data_dir)


def pair_adversarial(raw: RawSplit) -> list[tuple[int, int]]:
    """Pair each original row with its negated copy by id: ``(original position, negated position)``, in file
    order of the originals.

    Raises:
        DataError: a duplicate id; an original without its ``<id>-adversarial`` row (every original must pair);
            a negated row without its original; a pair whose label is not flipped. Each names the file, line
            and id.
    """
    where: dict[str, int] = {}
    for i, ex in enumerate(raw.examples):
        if ex.id in where:
            raise DataError(f"{raw.source}: line {ex.line}: id {ex.id!r} occurs twice (first on line "
                            f"{raw.examples[where[ex.id]].line})")
        where[ex.id] = i
    pairs = []
    for i, ex in enumerate(raw.examples):
        if ex.id.endswith(ADVERSARIAL_SUFFIX):
            if ex.id.removesuffix(ADVERSARIAL_SUFFIX) not in where:
                raise DataError(f"{raw.source}: line {ex.line}: negated row {ex.id!r} has no original "
                                f"{ex.id.removesuffix(ADVERSARIAL_SUFFIX)!r}")
            continue
        partner = where.get(ex.id + ADVERSARIAL_SUFFIX)
        if partner is None:
            raise DataError(f"{raw.source}: line {ex.line}: original {ex.id!r} has no negated row "
                            f"{ex.id + ADVERSARIAL_SUFFIX!r} (every original must pair)")
        negated = raw.examples[partner]
        if negated.label != 1 - int(ex.label):
            raise DataError(f"{raw.source}: line {negated.line}: id {negated.id!r}: label {negated.label} is not the "
                            f"flip of its original's {ex.label} (line {ex.line})")
        pairs.append((i, partner))
    if not pairs:
        raise DataError(f"{raw.source}: no original rows (ids without {ADVERSARIAL_SUFFIX!r})")
    return pairs


def pair_scores(chosen: list[int], labels: list[int], pairs: list[tuple[int, int]]) -> dict:
    """Accuracy on the originals, on the negated rows, the both-right share of pairs, and accuracy on every row.

    Args:
        chosen: the chosen candidate per row (``argmax`` of the ranking scores).
        labels: the correct candidate per row.
        pairs: :func:`pair_adversarial`'s positions.
    """
    right = [int(c == y) for c, y in zip(chosen, labels)]
    n = len(pairs)
    original = sum(right[i] for i, _ in pairs)
    negated = sum(right[j] for _, j in pairs)
    both = sum(right[i] and right[j] for i, j in pairs)
    return {"pairs": n,
            "original": {"accuracy": original / n, "correct": original, "n": n},
            "negated": {"accuracy": negated / n, "correct": negated, "n": n},
            "both_right": {"share": both / n, "pairs": both, "n": n},
            "adversarial_dev": {"accuracy": sum(right) / len(right), "correct": sum(right), "n": len(right)},
            "chance": CHANCE}


def arct_diagnosis(loaded, task_name: str, adversarial: str, data_dir: Path, device: str = "cpu",
                   batch_size: int | None = None) -> dict:
    """Score a loaded run (:class:`mtdnn.training.inference.LoadedModel`) on the adversarial dev file.

    Args:
        task_name: the run's ARCT task (its head and text columns are used).
        adversarial: the adversarial file, relative to ``data_dir`` or absolute.

    Returns:
        :func:`pair_scores` plus ``model``, ``task``, ``trained_on`` (the task's train file) and
        ``adversarially_trained`` (whether that file is an adversarial one, by its name).

    Raises:
        ConfigError, DataError: see :func:`adversarial_task`, :func:`pair_adversarial`.
    """

    task = loaded.task(task_name)
    raw = load_adversarial(task, adversarial, data_dir)
    pairs = pair_adversarial(raw)
    split = tokenize_examples(raw.examples, task, loaded.tokenizer, loaded.max_length, split="adversarial")
    scores = predict_outputs(loaded.model.to(device), task, split, loaded.tokenizer.pad_token_id or 0,
                             batch_size or loaded.eval_batch_size, loaded.pad_to_multiple_of, device=device)
    chosen = scores.argmax(-1).tolist()  # scores: (n, 2)
    result = pair_scores(chosen, [int(ex.label) for ex in raw.examples], pairs)
    train = task.splits.get("train")
    trained_on = train.path if train is not None and train.path else None
    return {"model": str(loaded.model_dir), "task": task_name, "adversarial_file": raw.source,
            "trained_on": trained_on,
            "adversarially_trained": bool(trained_on and "adv" in Path(trained_on).name), **result}


def format_arct_table(result: dict) -> str:
    """Markdown: the four accuracies and chance."""
    lines = ["| rows | accuracy | n |", "|---|---:|---:|",
             f"| original (dev) | {result['original']['accuracy']:.3f} | {result['original']['n']} |",
             f"| claim-negated | {result['negated']['accuracy']:.3f} | {result['negated']['n']} |",
             f"| both rows of a pair right | {result['both_right']['share']:.3f} | {result['both_right']['n']} pairs |",
             f"| whole adversarial dev | {result['adversarial_dev']['accuracy']:.3f} | {result['adversarial_dev']['n']} |",
             f"| chance | {result['chance']:.3f} | |"]
    return "\n".join(lines) + "\n"


def write_arct_outputs(result: dict, output_dir: str | Path, stem: str = "diagnose-arct") -> dict[str, Path]:
    """Write ``<stem>.json`` and ``<stem>.png`` (bars for the four figures, chance as a dashed line)."""

    output_dir = claim_diagnose_dir(output_dir)

    output_dir = Path(output_dir)
    groups = ["original", "negated", "both right", "adversarial dev"]
    values = [result["original"]["accuracy"], result["negated"]["accuracy"], result["both_right"]["share"],
              result["adversarial_dev"]["accuracy"]]
    png = grouped_bars(output_dir / f"{stem}.png", groups, {"accuracy": values},
                       f"Adversarial ARCT: {Path(result['model']).name} (task {result['task']})",
                       reference=("chance", CHANCE))
    path = output_dir / f"{stem}.json"
    write_json_atomic(path, {**result, "plot": png.name})
    return {"json": path, "png": png}

