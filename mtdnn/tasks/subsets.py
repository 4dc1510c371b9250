"""Seeded, stratified subsets: nested training subsets for few-shot transfer (MT-DNN arXiv 1901.11504, section
4.4), and the K folds of cross-fitted teachers (:func:`fold_assignment`).

For each seed the training pool is put in one *stratified order*; the subset of size k is the first k examples
of that order. So a smaller subset lies inside every larger one of the same seed, and every encoder fine-tuned
with that seed sees exactly the same examples.

The order is built in two steps:

1. within each class, the members are shuffled with a generator seeded by ``seed``;
2. the sequence of classes is a house-monotone apportionment: position k+1 (1-based) goes to the class c, among
   those with members left, with the largest deficit ``(k+1) * n_c / N - count_c(k)`` (integers:
   ``(k+1) * n_c - count_c * N``), ties broken by a seeded random ranking of the classes. Before that rule
   applies, the first positions hold one member of each class (largest classes first), so every subset of at
   least as many examples as there are classes holds every class.

Every prefix of k examples then holds ``k * n_c / N`` members of class c, rounded down or up (always for two
classes; for three to four classes in every case we tried, SNLI and SciTail included). Drawing keys
``(rank within class + U(0,1)) / n_c`` and sorting would also stratify, but drifts up to about 1.6 examples from
proportional on three classes.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch

from ..errors import ConfigError


def stratified_order(labels: Sequence[int], seed: int) -> list[int]:
    """A stratified permutation of ``range(len(labels))`` (see the module docstring); prefixes are the subsets.

    Args:
        labels: the class id of each pool example, ``(N,)``.
        seed: the subset seed; the same seed always gives the same order.

    Returns:
        positions into ``labels``, each exactly once.
    """
    n_total = len(labels)
    classes = sorted(set(labels))
    generator = torch.Generator().manual_seed(int(seed))
    members: dict[int, list[int]] = {}
    for c in classes:
        rows = [i for i, y in enumerate(labels) if y == c]
        members[c] = [rows[j] for j in torch.randperm(len(rows), generator=generator).tolist()]
    tie_rank = dict(zip(classes, torch.randperm(len(classes), generator=generator).tolist()))
    size = {c: len(members[c]) for c in classes}
    taken = dict.fromkeys(classes, 0)
    order: list[int] = []
    for k in range(n_total):
        unseen = [c for c in classes if taken[c] == 0]
        open_classes = unseen or [c for c in classes if taken[c] < size[c]]
        c = max(open_classes, key=lambda c: ((k + 1) * size[c] - taken[c] * n_total, -tie_rank[c]))
        order.append(members[c][taken[c]])
        taken[c] += 1
    return order


def sizes_from_fractions(fractions: Sequence[float], pool_size: int) -> list[int]:
    """``round(f * pool_size)`` for each fraction f in (0, 1].

    Raises:
        ConfigError: a fraction outside (0, 1].
    """
    bad = [f for f in fractions if not 0 < f <= 1]
    if bad:
        raise ConfigError(f"--fractions: {bad[0]} is not in (0, 1] (a fraction of the {pool_size}-example pool)")
    return [round(f * pool_size) for f in fractions]


def check_sizes(sizes: Sequence[int], pool_size: int, num_classes: int, origin: dict[int, str] | None = None) -> None:
    """Every subset size must hold one example per class and fit in the pool.

    Args:
        sizes: subset sizes in examples.
        pool_size: examples in the pool.
        num_classes: classes present in the pool.
        origin: how each size was asked for (e.g. ``"--fractions 0.001"``), for messages.

    Raises:
        ConfigError: a size below ``num_classes`` or above ``pool_size``.
    """
    origin = origin or {}
    for k in sizes:
        asked = origin.get(k, f"--sizes {k}")
        if k > pool_size:
            raise ConfigError(f"{asked}: {k} examples is more than the {pool_size} in the pool")
        if k < num_classes:
            raise ConfigError(f"{asked}: {k} examples cannot hold one example of each of the {num_classes} classes "
                              f"(use at least {num_classes})")


def class_counts(labels: Sequence[int], positions: Sequence[int]) -> Counter:
    """``{class id: count}`` of the examples at ``positions``."""
    return Counter(labels[i] for i in positions)


def fold_assignment(strata: Sequence[int], k: int, seed: int) -> list[int]:
    """Stratified K-fold assignment: the 0-based fold of each row, ``(N,)`` -> ``(N,)`` in ``range(k)``.

    The rows of each stratum (in stratum order) are shuffled with a generator seeded by ``seed``, the strata are
    concatenated, and the rows are dealt to folds round-robin. So every fold holds ``n_c / k`` rows of each
    stratum c, rounded down or up, and fold sizes differ by at most one. Used for out-of-fold soft targets
    (cross-fitting; stacked generalisation, Wolpert 1992): members trained without fold f produce the soft targets
    of fold f.

    Args:
        strata: the stratum of each row (the class id; regression: the score rounded to an integer).
        k: the number of folds, 2 <= k <= N.
        seed: the assignment's seed.

    Raises:
        ConfigError: k < 2 or k larger than the number of rows.
    """
    if not 2 <= k <= len(strata):
        raise ConfigError(f"cross_fit: {k} folds need 2 <= K <= the {len(strata)} training rows")
    generator = torch.Generator().manual_seed(int(seed))
    order: list[int] = []
    for c in sorted(set(strata)):
        rows = [i for i, s in enumerate(strata) if s == c]
        order += [rows[j] for j in torch.randperm(len(rows), generator=generator).tolist()]
    folds = [0] * len(strata)
    for position, row in enumerate(order):
        folds[row] = position % k
    return folds
