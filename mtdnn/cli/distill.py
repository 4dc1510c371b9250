"""``python -m mtdnn.distill [TEACHERS_SPEC] STUDENT_SPEC``: distil teacher ensembles into one multi-task student.

With two specs the teachers are built (or resumed) first; with one, the student spec's ``teachers`` directory must
hold a finished build (MT-DNN-KD, stage 2b)::

    python -m mtdnn.distill teachers/glue.yaml students/glue.yaml --from-run runs/<mt-run> --data-dir ../shared/data
    python -m mtdnn.distill students/glue.yaml --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..distillation.specs import TeacherSpec, load_spec
from ..distillation.student_spec import StudentSpec
from ..errors import HelpFormatter, Interrupted, run_cli
from ..tasks.reading import resolve_data_dir
from .common import setup_logging
from .settings import add_trainer_args, lightning_settings
from .teachers import add_common_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mtdnn.distill", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("specs", nargs="+", metavar="SPEC",
                   help="[TEACHERS_SPEC] STUDENT_SPEC: with both, the teachers are built (or resumed) first")
    add_common_args(p)
    p.add_argument("--output-dir", default=None, help="student run directory (overrides the spec's output_dir)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a student run directory holding a run (complete or interrupted)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted student in its run directory from checkpoints/last.ckpt (same "
                        "settings); --seeds resumes interrupted arms by itself")
    g = p.add_argument_group("paired comparison (MT-DNN-KD's claim, seed for seed)")
    g.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="train the student and a gold-only baseline (alpha = 0) with N paired seeds each, then "
                        "report mean ± sd, the paired t-interval and a paired bootstrap (see the README)")
    g.add_argument("--baseline", choices=["gold-only"], default="gold-only",
                   help="the comparison's baseline arm (default: gold-only)")
    g.add_argument("--bootstrap-resamples", type=int, default=10_000, help="paired bootstrap resamples (10000)")
    add_trainer_args(p, defaults={"devices": 1})
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.specs) > 2:
        parser.error("give one or two specs: [TEACHERS_SPEC] STUDENT_SPEC")
    setup_logging()
    student_path = args.specs[-1]
    spec = load_spec(student_path, StudentSpec, "student")
    teacher_path = args.specs[0] if len(args.specs) == 2 else None
    teacher_spec = load_spec(teacher_path, TeacherSpec, "teacher") if teacher_path else None
    data_dir = resolve_data_dir(args.data_dir)  # a bad data root fails before torch is imported
    if args.seeds is not None:
        return _compare(args, spec, student_path, teacher_spec, teacher_path, data_dir)
    # keeps torch out of import time
    from ..distillation.student import REPORT_MD, distill

    try:
        run = distill(spec, student_path, teacher_spec, teacher_path, data_dir=data_dir,
                      from_run=args.from_run, teachers_dir=args.teachers_dir, output_dir=args.output_dir,
                      lightning=lightning_settings(args), overwrite=args.overwrite,
                      retrain_changed=args.retrain_changed, resume=args.resume)
    except (Interrupted, KeyboardInterrupt) as err:
        print(f"interrupted: {err}; rerun the same command with --resume to continue the student (complete "
              "teacher members are kept; an interrupted member is resumed by itself)", file=sys.stderr)
        return getattr(err, "exit_code", 130)
    if run.complete:
        print((run.directory / REPORT_MD).read_text(encoding="utf-8"))
        print(f"run directory: {run.directory}")
    return 0


def _compare(args, spec, student_path: str, teacher_spec, teacher_path: str | None, data_dir: Path) -> int:
    """``--seeds N``: build the teachers (with a teacher spec), then the paired comparison of the two arms."""
    # keeps torch out of import time
    from ..distillation import teachers
    from ..distillation.comparison import COMPARISON_MD, check_comparable, check_comparison_dir, run_comparison

    check_comparable(spec, student_path)  # before any teacher is built
    check_comparison_dir(spec, student_path, args.output_dir)
    teachers_dir = args.teachers_dir
    try:
        if teacher_spec is not None:
            teachers_dir = str(teachers.build(teacher_spec, teacher_path, data_dir, args.from_run, args.teachers_dir,
                                              lightning_settings(args), args.retrain_changed))
        run_comparison(spec, student_path, seeds=args.seeds, data_dir=data_dir, teachers_dir=teachers_dir,
                       from_run=args.from_run, output_dir=args.output_dir, lightning=lightning_settings(args),
                       resamples=args.bootstrap_resamples)
    except (Interrupted, KeyboardInterrupt) as err:
        print(f"interrupted: {err}; rerun the same command to resume (complete runs are kept)", file=sys.stderr)
        return getattr(err, "exit_code", 130)
    out = args.output_dir or f"{spec.output_dir}-paired"

    print((Path(out) / COMPARISON_MD).read_text(encoding="utf-8"))
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-distill``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
