"""One family of the encoder matrix, end to end, in its own process: ``python encoder_family_run.py FAMILY WORK``.

Builds a tiny ``FAMILY`` encoder (:mod:`encoder_families`), then through the toolkit's commands: trains two
synthetic tasks (``polarity``: one sentence; ``overlap``: a pair), evaluates the run, predicts raw text from the
run's best checkpoint, builds a one-member teacher and distils a 2-layer student (a layer list; ALBERT: a layer
count, after checking that a layer list is refused), and checks the bad-input cases of the family. Writes
``WORK/result.json`` (read by ``test_encoder_families.py``, which reloads the export in its own process). Any
failure exits non-zero with the traceback on stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import yaml

RAW_SINGLE = ["The film was very good.", "a", "This garden seemed rather grim near the river but the painter "
              "stayed calm and kind with the child", "Really bad!"]
RAW_PAIR = [("The doctor was quite happy.", "there is a doctor"), ("a", "b"),
            ("That winter looked very dark under the city and the market stayed cold", "there is a teacher")]
STUDENT_LAYERS = {"modernbert": [0, 3]}  # layers 0 and 3: both global attention (see encoder_families)


def exit_code(main, argv: list[str]) -> tuple[int, str]:
    """Run a command's ``main`` as its console script does (``run_cli``); return its exit code and stderr."""
    from mtdnn.errors import run_cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            run_cli(main, argv)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    return code, err.getvalue()


def run(family: str, work: Path) -> dict:
    from encoder_families import build_encoder, write_tasks
    from mtdnn.cli import distill, evaluate, predict
    from mtdnn.cli import train as trainer
    from mtdnn.modeling.heads import has_pooler
    from mtdnn.modeling.model import load_encoder

    times, result = {}, {"family": family}
    start = time.perf_counter()
    encoder = str(build_encoder(family, work / "encoder"))
    task_defs = write_tasks(work)
    data = str(work / "data")
    times["build"] = time.perf_counter() - start

    # 1. Train both tasks; the pooling is chosen by the toolkit (the tasks set none).
    start = time.perf_counter()
    run_dir = work / "run"
    assert trainer.main([str(task_defs), "--data-dir", data, "--encoder", encoder, "--batch-size", "8",
                         "--eval-batch-size", "16", "--max-epochs", "1", "--lr", "1e-3", "--accelerator", "cpu",
                         "--output-dir", str(run_dir)]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    result["pooling"] = {n: t["head"]["pooling"] for n, t in config["resolved"]["tasks"].items()}
    result["export_pooling"] = {n: t["head"]["pooling"] for n, t in
                                yaml.safe_load((run_dir / "export" / "tasks.yaml").read_text())["tasks"].items()}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    result["dev"] = metrics["best"]["tasks"]
    times["train"] = time.perf_counter() - start

    # 2. Evaluate the run (its best checkpoint) on dev: the training's own dev scores.
    start = time.perf_counter()
    code, err = exit_code(evaluate.main, [str(run_dir), "--output", str(work / "eval.json")])
    assert code == 0, err
    result["evaluate"] = json.loads((work / "eval.json").read_text())["tasks"]
    times["evaluate"] = time.perf_counter() - start

    # 3. Predict raw text (batches of different lengths, padded on the tokenizer's side) from the run.
    start = time.perf_counter()
    (work / "single.tsv").write_text("\n".join(RAW_SINGLE) + "\n", encoding="utf-8")
    (work / "pair.tsv").write_text("\n".join("\t".join(p) for p in RAW_PAIR) + "\n", encoding="utf-8")
    for task, raw in (("polarity", "single.tsv"), ("overlap", "pair.tsv")):
        code, err = exit_code(predict.main, [str(run_dir), "--task", task, "--input", str(work / raw), "--format",
                                             "jsonl", "--output", str(work / f"run-{task}.jsonl")])
        assert code == 0, err
    times["predict"] = time.perf_counter() - start

    # 3b. The SAN answer module on the pair task: train, then predict raw pairs from the export.
    start = time.perf_counter()
    doc = yaml.safe_load(task_defs.read_text())
    san_defs = work / "san-tasks.yaml"
    san_defs.write_text(yaml.safe_dump({"tasks": {"overlap": {**doc["tasks"]["overlap"],
                                                               "head": {"type": "san", "steps": 2}}}}))
    san_run = work / "san-run"
    assert trainer.main([str(san_defs), "--data-dir", data, "--encoder", encoder, "--batch-size", "8",
                         "--eval-batch-size", "16", "--max-epochs", "1", "--lr", "1e-3", "--accelerator", "cpu",
                         "--output-dir", str(san_run)]) == 0
    code, err = exit_code(predict.main, [str(san_run / "export"), "--task", "overlap", "--input",
                                         str(work / "pair.tsv"), "--format", "jsonl", "--output",
                                         str(work / "san-overlap.jsonl")])
    assert code == 0, err
    san_rows = [json.loads(line) for line in (work / "san-overlap.jsonl").read_text().splitlines()]
    result["san"] = {"dev": json.loads((san_run / "metrics.json").read_text())["best"]["tasks"]["overlap"],
                     "predictions": len(san_rows),
                     "probabilities_sum": [sum(r["probabilities"].values()) for r in san_rows]}
    times["san"] = time.perf_counter() - start
    # 4. Bad input: a pooler pooling on an encoder without a pooler (exit 2 before any run directory exists).
    if not has_pooler(load_encoder(encoder)):
        doc = yaml.safe_load(task_defs.read_text())
        doc["tasks"]["polarity"]["head"] = {"pooling": "pooler"}
        bad = work / "pooler-tasks.yaml"
        bad.write_text(yaml.safe_dump(doc), encoding="utf-8")
        code, err = exit_code(trainer.main, [str(bad), "--data-dir", data, "--encoder", encoder, "--accelerator",
                                             "cpu", "--output-dir", str(work / "pooler-run")])
        result["pooler_refused"] = {"code": code, "message": err.strip().splitlines()[-1] if err.strip() else "",
                                    "run_dir_made": (work / "pooler-run").exists()}

    # 5. Distil: one teacher member for polarity (soft targets), overlap on gold labels, a 2-layer student.
    start = time.perf_counter()
    teacher_spec = work / "teachers.yaml"
    teacher_spec.write_text(yaml.safe_dump({
        "task_defs": str(task_defs), "from_run": str(run_dir), "output_dir": str(work / "teachers"),
        "tasks": ["polarity"], "members": 1, "finetune": {"max_epochs": 1, "batch_size": 8, "lr": 1e-3}}))
    student = {"task_defs": str(task_defs), "teachers": str(work / "teachers"), "output_dir": str(work / "student"),
               "init": {"encoder": "pretrained"}, "distill": ["polarity"], "gold": ["overlap"],
               "temperature": 2.0, "alpha": 0.5, "train": {"max_epochs": 1, "batch_size": 8, "lr": 1e-3}}
    if family == "albert":  # one shared layer: a layer list is refused, a layer count runs it twice
        bad = work / "student-layers.yaml"
        bad.write_text(yaml.safe_dump({**student, "init": {"encoder": "pretrained", "layers": [0, 2]},
                                       "output_dir": str(work / "student-layers")}))
        code, err = exit_code(distill.main, [str(teacher_spec), str(bad), "--data-dir", data, "--accelerator", "cpu"])
        result["layer_list_refused"] = {"code": code, "message": err.strip().splitlines()[-1] if err.strip() else "",
                                        "run_dir_made": (work / "student-layers").exists()}
        student["init"]["num_layers"] = 2
    else:
        student["init"]["layers"] = STUDENT_LAYERS.get(family, [0, 2])
    student_spec = work / "student.yaml"
    student_spec.write_text(yaml.safe_dump(student))
    code, err = exit_code(distill.main, [str(teacher_spec), str(student_spec), "--data-dir", data,
                                         "--accelerator", "cpu"])
    assert code == 0, err
    student_config = json.loads((work / "student" / "export" / "encoder" / "config.json").read_text())
    result["student"] = {"init": student["init"], "num_hidden_layers": student_config.get("num_hidden_layers",
                         student_config.get("n_layers", student_config.get("n_layer"))),
                         "layer_types": student_config.get("layer_types"),
                         "pooling": {n: t["head"]["pooling"] for n, t in yaml.safe_load(
                             (work / "student" / "config.yaml").read_text())["resolved"]["tasks"].items()},
                         "report": json.loads((work / "student" / "report.json").read_text())["student"]["run"]}
    times["distil"] = time.perf_counter() - start
    result["seconds"] = {k: round(v, 2) for k, v in times.items()}
    return result


def main() -> None:
    import os
    import torch

    family, work = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work.mkdir(parents=True, exist_ok=True)
    result = run(family, work)
    (work / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
