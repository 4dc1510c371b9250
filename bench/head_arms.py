"""SAN against the default heads, and an MLM auxiliary task against none, on the main job's four-task run.

    python bench/head_arms.py train san --seeds 42,43,44 --data-dir ../shared/data --runs-dir runs/arms
    python bench/head_arms.py train mlm-span --seeds 42 --data-dir ../shared/data --runs-dir runs/arms
    python bench/head_arms.py summary san --seeds 42,43,44 --runs-dir runs/arms [--output bench/results/arms-san.json]

Arms (each a task-definition file written beside its runs, derived from ``task_defs/glue.yaml``):

- ``default``: the main job as the README runs it (RTE, MRPC, STS-B, CoLA; 3 epochs, proportional schedule);
- ``san``: the same, with ``head: {type: san, steps: 5, step_dropout: 0.1}`` on the pair classification tasks RTE
  and MRPC (MT-DNN section 3.1);
- ``mlm-span``: the same four tasks plus one ``mlm`` task per task over that task's own train texts (both
  sentences of a pair), SpanBERT masking at rate 0.15, seed 0; the MLM tasks are left out of the dev average.

``train`` runs ``python -m mtdnn.train`` once per seed (same flags otherwise; a seed whose run directory already
holds a complete run is skipped). ``summary`` reads each seed's ``metrics.json`` (best epoch by the dev
average) for the arm and for the baseline (``default`` runs in ``--runs-dir``, else the stored
``bench/results/glue-4task-seed<s>-metrics.json``), prints per task the mean ± sample sd over seeds of both arms
and the paired difference (arm - baseline, same seed) with its mean ± sd, and writes the table as JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["rte", "mrpc", "stsb", "cola"]
SAN_HEAD = {"type": "san", "steps": 5, "step_dropout": 0.1}


def arm_task_defs(arm: str) -> tuple[dict, list[str]]:
    """The task-definition document of ``arm`` and the tasks it trains."""
    doc = yaml.safe_load((ROOT / "task_defs" / "glue.yaml").read_text())
    tasks = {name: doc["tasks"][name] for name in TASKS}
    if arm == "san":
        for name in ("rte", "mrpc"):
            tasks[name]["head"] = dict(SAN_HEAD)
    elif arm == "mlm-span":
        for name in TASKS:
            source = doc["tasks"][name]
            tasks[f"{name}_mlm"] = {
                "description": f"MLM over {name}'s train texts (SpanBERT masking)",
                "type": "mlm",
                "splits": {"train": copy.deepcopy(source["splits"]["train"])},
                "text": list(source["text"]),
                "masking": {"strategy": "span", "rate": 0.15, "seed": 0},
            }
    elif arm != "default":
        raise SystemExit(f"unknown arm {arm!r}: default, san or mlm-span")
    return {"tasks": tasks}, list(tasks)


def best_scores(metrics_path: Path) -> dict[str, float]:
    """Per task its averaged metric (the first in ``task_defs/glue.yaml``: accuracy, accuracy, pearson, mcc) at the
    best epoch, plus ``average`` (the dev average that selected it)."""
    metrics = json.loads(metrics_path.read_text())
    if metrics.get("status") != "complete":
        raise SystemExit(f"{metrics_path}: run not complete (status {metrics.get('status')!r})")
    best = metrics["best"]
    glue = yaml.safe_load((ROOT / "task_defs" / "glue.yaml").read_text())["tasks"]
    scores = {task: best["tasks"][task][glue[task]["metrics"][0]] for task in TASKS}  # the averaged metric
    scores["average"] = best["average"]
    return scores


def train(args) -> None:
    runs = Path(args.runs_dir) / args.arm
    runs.mkdir(parents=True, exist_ok=True)
    doc, tasks = arm_task_defs(args.arm)
    defs_path = runs / "task_defs.yaml"
    defs_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for seed in args.seeds:
        out = runs / f"seed{seed}"
        done = out / "metrics.json"
        if done.exists() and json.loads(done.read_text()).get("status") == "complete":
            print(f"{out}: complete, skipped", flush=True)
            continue
        cmd = [sys.executable, "-m", "mtdnn.train", str(defs_path), "--tasks", ",".join(tasks),
               "--data-dir", args.data_dir, "--seed", str(seed), "--output-dir", str(out)]
        cmd += ["--resume"] if (out / "checkpoints" / "last.ckpt").exists() else ["--overwrite"]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summary(args) -> None:
    runs = Path(args.runs_dir)
    rows, sources = {}, {}
    for seed in args.seeds:
        arm = best_scores(runs / args.arm / f"seed{seed}" / "metrics.json")
        local = runs / "default" / f"seed{seed}" / "metrics.json"
        stored = ROOT / "bench" / "results" / f"glue-4task-seed{seed}-metrics.json"
        base_path = local if local.exists() else stored
        rows[seed] = (arm, best_scores(base_path))
        sources[seed] = str(base_path)
    table = {}
    print(f"{args.arm} vs default, seeds {','.join(map(str, args.seeds))} (best epoch by dev average)")
    print(f"{'task':<8} {'default':>16} {args.arm:>16} {'paired diff':>16}")
    for task in TASKS + ["average"]:
        base = [rows[s][1][task] for s in args.seeds]
        arm = [rows[s][0][task] for s in args.seeds]
        diff = [a - b for a, b in zip(arm, base)]
        table[task] = {"default": base, args.arm: arm, "diff": diff,
                       "default_mean_sd": mean_sd(base), "arm_mean_sd": mean_sd(arm), "diff_mean_sd": mean_sd(diff)}
        fmt = lambda ms: f"{ms[0]:.4f} ± {ms[1]:.4f}"  # noqa: E731
        print(f"{task:<8} {fmt(mean_sd(base)):>16} {fmt(mean_sd(arm)):>16} {fmt(mean_sd(diff)):>16}")
    if args.output:
        out = Path(args.output)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"arm": args.arm, "seeds": args.seeds, "baseline_runs": sources,
                                   "selection": "best epoch by the dev average", "tasks": table}, indent=2))
        tmp.replace(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["train", "summary"])
    parser.add_argument("arm", choices=["default", "san", "mlm-span"])
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[42, 43, 44])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "arms"))
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    (train if args.action == "train" else summary)(args)


if __name__ == "__main__":
    main()
