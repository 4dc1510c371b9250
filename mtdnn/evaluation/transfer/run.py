"""One transfer sweep from a :class:`~mtdnn.evaluation.transfer.spec.TransferSpec`: validate, sweep, report."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from ...errors import ConfigError, DataError, Interrupted
from ...fileio import check_output_dir, claim_output_dir, write_atomic, write_json_atomic
from ...tasks.data import load_split, resolve_data_dir
from ...tasks.subsets import check_sizes, sizes_from_fractions, stratified_order
from ...tasks.taskdef import load_task_defs, select_tasks, shipped_task_defs
from ...training.flags import check_lightning_flags
from .encoders import parse_encoder_list, resolve_encoder_spec
from .report import limits_text
from .report import CURVE_PNG, RESULTS_JSON, RESULTS_MD, build_report, plot_learning_curve, render_markdown
from .settings import SETTINGS
from .spec import TransferSpec
from .sweep import PER_RUN_DIR, choose_splits, run_sweep

log = logging.getLogger("mtdnn.transfer")


def run_transfer(spec: TransferSpec) -> dict:
    """Fine-tune every (encoder, size, seed) of ``spec`` and write ``results.json``, ``results.md`` and
    ``learning_curve.png`` to its output directory (default ``runs/transfer-<task>``); see :mod:`mtdnn.cli.transfer`.

    Returns:
        The report (the content of ``results.json``).

    Raises:
        ConfigError, DataError, CheckpointError: bad settings, task definitions, data or runs, before any training.
        Interrupted: Ctrl-C during a fine-tune (finished runs are kept in ``per_run/`` and reused by a rerun).
    """

    settings = SETTINGS

    # 1. Validate everything that can be wrong before training anything.
    check_lightning_flags(accelerator=spec.accelerator, precision=spec.precision, devices=1)  # one device per run
    task_defs = shipped_task_defs(spec.task_defs)
    task = select_tasks(load_task_defs(task_defs), [spec.task], str(task_defs))[spec.task]
    if not task.kind.classifies:
        raise ConfigError(f"--task {task.name}: few-shot transfer needs a classification task (stratified subsets, "
                          f"accuracy); '{task.name}' is a {task.type} task")
    pool_split, eval_split = choose_splits(task, spec.pool_split, spec.eval_split)
    data_dir = resolve_data_dir(spec.data_dir)
    pool_raw = load_split(task, pool_split, data_dir)
    eval_raw = load_split(task, eval_split, data_dir)
    if not eval_raw.labelled:
        raise DataError(f"{eval_raw.source}: task '{task.name}', split '{eval_split}' has no labels to score")
    pool_labels = [int(ex.label) for ex in pool_raw.examples]
    pool_size, num_classes = len(pool_labels), len(set(pool_labels))
    origin: dict[int, str] = {}
    for k in spec.sizes or []:
        origin.setdefault(k, f"--sizes {k}")
    for f, k in zip(spec.fractions or [], sizes_from_fractions(spec.fractions or [], pool_size)):
        origin.setdefault(k, f"--fractions {f:g} (round({f:g} x {pool_size}))")
    sizes = sorted(origin)
    check_sizes(sizes, pool_size, num_classes, origin)
    reuse = (spec.reuse_head or task.name) if spec.reuse_head is not None else None
    encoders = [resolve_encoder_spec(label, item, task, reuse, spec.trust_remote_code)
                for label, item in parse_encoder_list(",".join(spec.encoders))]
    if reuse is not None:
        if not any(e.kind == "run" for e in encoders):
            raise ConfigError(f"--reuse-head {reuse}: none of the encoders is a run of this toolkit, so there is no "
                              "head to reuse (drop the flag, or list a run directory in --encoders)")
        for e in encoders:
            if e.kind != "run":
                log.warning("--reuse-head: %s is not a run of this toolkit; it starts from a fresh head", e.label)
    for e in encoders:
        if e.limited:
            log.warning("--encoders %s: %s was a limited run (%s): a smoke test, not a trained encoder; its transfer "
                        "results say little", e.label, e.spec, limits_text(e.limited))
    seeds = list(range(spec.seeds))
    orders = {seed: stratified_order(pool_labels, seed) for seed in seeds}
    out_dir = Path(spec.output_dir) if spec.output_dir else Path("runs") / f"transfer-{task.name}"
    check_output_dir(out_dir, "--output-dir", "transfer",
                     recognised=lambda d: (d / RESULTS_JSON).is_file() or (d / PER_RUN_DIR).is_dir())
    claim_output_dir(out_dir, "transfer")
    eval_examples = min(len(eval_raw.examples), spec.limit_eval_examples or len(eval_raw.examples))

    metric = "accuracy" if "accuracy" in task.metric_names else task.metric_names[0]

    # 2. Fine-tune and score every (encoder, size, seed); finished runs are kept in per_run/ for resuming.
    # 2. Fine-tune and score every (encoder, size, seed); finished runs are kept in per_run/ for resuming.
    sigint = signal.getsignal(signal.SIGINT)
    try:
        records = run_sweep(task, encoders, sizes, orders, pool_split, eval_split, data_dir, eval_examples, metric,
                            settings, out_dir, spec.accelerator, spec.precision, spec.trust_remote_code, spec.fresh)
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, SystemExit) and err.code not in (None, 0, 1):
            raise
        raise Interrupted(f"finished runs are kept in {out_dir / PER_RUN_DIR}; run the same command again to "
                          "resume", 130) from None
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after an interrupt

    # 3. The report: learning_curve.png, results.md and, last, results.json, each written atomically.
    report = build_report(task, spec, settings, encoders, records, seeds, sizes, origin, pool_raw, eval_raw,
                          eval_examples, metric)
    plot_learning_curve(report, out_dir / CURVE_PNG)
    write_atomic(out_dir / RESULTS_MD, render_markdown(report))
    write_json_atomic(out_dir / RESULTS_JSON, report)
    return report


