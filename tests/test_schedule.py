"""The multi-task batch sampler: proportions, determinism, reshuffling, DDP sharding and its state."""

import math
from collections import Counter

import pytest

from mtdnn.tasks.schedule import EvalBatchSampler, MultiTaskBatchSampler, TaskSize, length_grouped_batches

SIZES = [TaskSize([5 + (i % 40) for i in range(n)]) for n in (100, 300, 40)]


def test_algorithm1_uses_every_batch_of_every_task_once_per_epoch():
    sampler = MultiTaskBatchSampler(SIZES, batch_size=16, seed=1)
    plan = sampler.plan(0)
    assert Counter(t for t, _ in plan) == {0: math.ceil(100 / 16), 1: math.ceil(300 / 16), 2: math.ceil(40 / 16)}
    for t, size in enumerate((100, 300, 40)):
        rows = [r for task, batch in plan if task == t for r in batch]
        assert sorted(rows) == list(range(size))  # each example exactly once
    assert len(sampler) == len(plan)
    # interleaved, not task after task
    assert len({plan[i][0] for i in range(8)}) > 1


def test_plan_is_deterministic_and_reshuffled_each_epoch():
    a = MultiTaskBatchSampler(SIZES, batch_size=16, seed=7)
    b = MultiTaskBatchSampler(SIZES, batch_size=16, seed=7)
    assert a.plan(0) == b.plan(0)
    assert a.plan(0) != a.plan(1)
    assert a.plan(0) != MultiTaskBatchSampler(SIZES, batch_size=16, seed=8).plan(0)
    a.set_epoch(1)
    assert [[(t, r) for t, r, *_ in batch] for batch in a] == [[(t, r) for r in rows] for t, rows in a.plan(1)]


def test_temperature_sampling_matches_its_probabilities():
    sampler = MultiTaskBatchSampler(SIZES, batch_size=8, schedule="temperature", temperature=2.0, seed=0)
    probs = sampler.task_probabilities()
    expected = [n ** 0.5 for n in (100, 300, 40)]
    assert probs == pytest.approx([e / sum(expected) for e in expected])
    counts = Counter(t for e in range(40) for t, _ in sampler.plan(e))
    total = sum(counts.values())
    assert total == 40 * len(sampler)  # Algorithm 1's number of steps per epoch
    for t, p in enumerate(probs):
        assert counts[t] / total == pytest.approx(p, abs=0.02)


def test_uniform_and_sampling_weight():
    uniform = MultiTaskBatchSampler(SIZES, batch_size=8, schedule="uniform")
    assert uniform.task_probabilities() == pytest.approx([1 / 3] * 3)
    weighted = MultiTaskBatchSampler([SIZES[0], TaskSize(SIZES[2].lengths, sampling_weight=2.0)], batch_size=8)
    assert weighted.batches_per_task() == [13, 10]  # 40 rows = 5 batches, doubled
    rows = [r for t, b in weighted.plan(0) if t == 1 for r in b]
    assert Counter(Counter(rows).values()) == {2: 40}


def test_length_grouping_keeps_batches_homogeneous():
    import torch

    lengths = [i % 97 for i in range(1000)]
    grouped = length_grouped_batches(lengths, 10, torch.Generator().manual_seed(0))
    random = length_grouped_batches(lengths, 10, torch.Generator().manual_seed(0), group_by_length=False)
    spread = lambda batches: sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)  # noqa
    assert spread(grouped) < spread(random) / 5
    assert sorted(i for b in grouped for i in b) == list(range(1000))


def test_ddp_shards_are_disjoint_same_task_and_padded_with_zero_weight():
    plans = []
    for rank in range(3):
        s = MultiTaskBatchSampler(SIZES, batch_size=16, seed=3, rank=rank, world_size=3)
        plans.append(list(s))
    single = MultiTaskBatchSampler(SIZES, batch_size=16, seed=3).plan(0)
    for step, (task, rows) in enumerate(single):
        shards = [plans[r][step] for r in range(3)]
        assert {k[0] for shard in shards for k in shard} == {task}
        real = [k[1] for shard in shards for k in shard if k[2] > 0]
        assert sorted(real) == sorted(rows)
        assert len({len(shard) for shard in shards}) == 1
        assert {k[3] for shard in shards for k in shard} == {len(rows)}  # every rank knows the global count


def test_state_dict_resumes_mid_epoch():
    s = MultiTaskBatchSampler(SIZES, batch_size=16, seed=5)
    it = iter(s)
    taken = [next(it) for _ in range(4)]
    state = s.state_dict()
    resumed = MultiTaskBatchSampler(SIZES, batch_size=16, seed=5)
    resumed.load_state_dict(state)
    full = list(MultiTaskBatchSampler(SIZES, batch_size=16, seed=5))
    assert taken + list(resumed) == full


def test_eval_sampler_covers_each_row_once_across_ranks():
    lengths = [i % 13 for i in range(101)]
    samplers = [EvalBatchSampler(lengths, 8, rank, 4) for rank in range(4)]
    rows = [i for s in samplers for b in s for i in b if isinstance(i, int)]
    assert sorted(rows) == list(range(101))
    # 13 batches on 4 ranks: every rank gets 4 (ranks 1-3 one weight-0 padding batch of the shortest row)
    assert [len(s) for s in samplers] == [4, 4, 4, 4] and [s.padding for s in samplers] == [0, 1, 1, 1]
    shortest = min(range(101), key=lambda i: (lengths[i], -i))
    assert all(s.batches[-1] == [(shortest, 0.0)] for s in samplers[1:])


def test_eval_sampler_gives_every_rank_a_batch_with_more_ranks_than_batches():
    samplers = [EvalBatchSampler([5, 3, 4], 512, rank, 3) for rank in range(3)]
    assert [s.batches for s in samplers] == [[[0, 2, 1]], [[(1, 0.0)]], [[(1, 0.0)]]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown schedule"):
        MultiTaskBatchSampler(SIZES, 8, schedule="annealed")
    with pytest.raises(ValueError):
        MultiTaskBatchSampler(SIZES, 0)


def test_no_group_by_length_flag_reaches_the_sampler(tmp_path):
    """--no-group-by-length (TrainConfig.group_by_length) gives random batches, as a Hugging Face Trainer does."""
    from mtdnn.cli.train import build_parser, config_from_args
    from mtdnn.training.datamodule import MultiTaskDataModule
    from mtdnn.training.resolve import datamodule_for

    for flags, expected in [([], True), (["--no-group-by-length"], False), (["--group-by-length"], True)]:
        config = config_from_args(build_parser().parse_args(["task_defs/glue.yaml", "--output-dir", str(tmp_path / "run"), "--data-dir", str(tmp_path),
                                                             *flags]))
        assert config.group_by_length is expected
        assert datamodule_for(config, {}, None, MultiTaskDataModule).group_by_length is expected
    lengths = list(range(200))
    sizes = [TaskSize(lengths)]
    batches = [list(b) for b in MultiTaskBatchSampler(sizes, 10, group_by_length=False)]
    grouped = [list(b) for b in MultiTaskBatchSampler(sizes, 10)]
    spread = lambda bs: max(max(lengths[k[1]] for k in b) - min(lengths[k[1]] for k in b) for b in bs)  # noqa: E731
    assert spread(grouped) < 20 <= spread(batches)
