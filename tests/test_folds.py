"""K-fold splits for out-of-fold (cross-fitted) teachers: a partition, stratified, seeded, and refused when invalid."""

from collections import Counter

import pytest

from mtdnn.errors import ConfigError
from mtdnn.tasks.data import fold_strata, load_split
from mtdnn.tasks.subsets import fold_assignment
from mtdnn.tasks.taskdef import parse_tasks


def test_fold_assignment_partitions_and_stratifies():
    strata = [0] * 37 + [1] * 23 + [2] * 5
    folds = fold_assignment(strata, 5, seed=3)
    assert sorted(set(folds)) == [0, 1, 2, 3, 4]
    sizes = Counter(folds)
    assert max(sizes.values()) - min(sizes.values()) <= 1
    for c, n_c in Counter(strata).items():
        per_fold = Counter(f for f, s in zip(folds, strata) if s == c)
        assert all(n_c // 5 <= per_fold.get(f, 0) <= -(-n_c // 5) for f in range(5)), (c, per_fold)
    assert fold_assignment(strata, 5, seed=3) == folds and fold_assignment(strata, 5, seed=4) != folds
    with pytest.raises(ConfigError, match="2 <= K"):
        fold_assignment(strata, 1, seed=0)


def _task(tmp_path, rows, kind="classification"):
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "train.tsv").write_text("s\tlabel\n" + "".join(f"text {i}\t{y}\n" for i, y in enumerate(rows)))
    doc = {"tasks": {"t": {
        "type": kind, "text": ["s"], "label": "label",
        **({"labels": ["a", "b"]} if kind == "classification" else {}),
        "splits": {"train": {"path": "t/train.tsv"},
                   **{f"in{f}": {"folds": {"from_split": "train", "k": 4, "fold": f, "keep": "in", "seed": 7}}
                      for f in range(1, 5)},
                   "out2": {"folds": {"from_split": "train", "k": 4, "fold": 2, "keep": "out", "seed": 7}}}}}}
    return parse_tasks(doc, "test.yaml")["t"]


def test_fold_splits_partition_the_training_set_by_id(tmp_path):
    task = _task(tmp_path, ["a"] * 30 + ["b"] * 10)
    full = [ex.id for ex in load_split(task, "train", tmp_path).examples]
    ins = [[ex.id for ex in load_split(task, f"in{f}", tmp_path).examples] for f in range(1, 5)]
    assert sorted(i for fold in ins for i in fold) == sorted(full)  # every row in exactly one fold
    assert all(len(set(a) & set(b)) == 0 for a in ins for b in ins if a is not b)
    out2 = [ex.id for ex in load_split(task, "out2", tmp_path).examples]
    assert set(out2) == set(full) - set(ins[1]) and not set(out2) & set(ins[1])
    labels = [ex.label for ex in load_split(task, "in1", tmp_path).examples]
    assert Counter(labels)[0] in (7, 8) and Counter(labels)[1] in (2, 3)  # 30/4 and 10/4, rounded down or up


def test_regression_folds_stratify_by_rounded_score(tmp_path):
    task = _task(tmp_path, [0.2, 0.4, 4.6, 4.9, 5.0, 0.0, 1.1, 0.9], kind="regression")
    examples = load_split(task, "train", tmp_path).examples
    assert fold_strata(task, examples) == [0, 0, 5, 5, 5, 0, 1, 1]


def test_bad_fold_specs_are_refused(tmp_path):
    from mtdnn.errors import ConfigError

    base = {"type": "classification", "text": ["s"], "label": "label", "labels": ["a", "b"]}
    with pytest.raises(ConfigError, match="fold 5 is not one of the 4 folds"):
        parse_tasks({"tasks": {"t": {**base, "splits": {"train": {"path": "x"}, "f": {
            "folds": {"from_split": "train", "k": 4, "fold": 5, "keep": "in"}}}}}}, "x.yaml")
    with pytest.raises(ConfigError, match="unknown split 'nope'"):
        parse_tasks({"tasks": {"t": {**base, "splits": {"train": {"path": "x"}, "f": {
            "folds": {"from_split": "nope", "k": 4, "fold": 1, "keep": "in"}}}}}}, "x.yaml")
