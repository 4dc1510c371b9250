"""``python -m mtdnn.teachers TEACHERS_SPEC``: flags -> :func:`mtdnn.distillation.teachers.build` (MT-DNN-KD, stage 2a)."""

from __future__ import annotations

import argparse
import sys

from ..distillation.specs import TeacherSpec, load_spec
from ..errors import HelpFormatter, Interrupted, run_cli
from ..tasks.reading import resolve_data_dir
from ..training.config import validate_config
from ..training.flags import check_trainer_flags
from .common import setup_logging
from .settings import add_trainer_args, lightning_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mtdnn.teachers",
                                description="Fine-tune per-task teacher ensembles from a multi-task run and cache "
                                            "their outputs (MT-DNN-KD).", formatter_class=HelpFormatter)
    p.add_argument("spec", help="teacher spec YAML (e.g. teachers/glue.yaml)")
    add_common_args(p)
    add_trainer_args(p, defaults={"devices": 1})
    return p


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-run", default=None, help="the multi-task run the members start from (overrides from_run)")
    p.add_argument("--data-dir", default=None,
                   help="data root for the task files (default: $MTDNN_DATA_DIR, else ../shared/data)")
    p.add_argument("--teachers-dir", default=None, help="teacher directory (overrides the spec's output_dir)")
    p.add_argument("--retrain-changed", action="store_true",
                   help="retrain complete members whose settings, multi-task run or data changed (default: error)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    spec = load_spec(args.spec, TeacherSpec, "teacher")
    lightning = lightning_settings(args)
    # a bad Lightning flag or data root fails here, before torch is imported, not in the first member's run
    check_trainer_flags(validate_config({"task_defs": spec.task_defs, **lightning}, "command line", flags=True))
    data_dir = resolve_data_dir(args.data_dir)
    # keeps torch out of import time
    from ..distillation.teachers import SUMMARY_MD, build

    try:
        teacher_dir = build(spec, args.spec, data_dir, args.from_run, args.teachers_dir, lightning,
                            args.retrain_changed)
    except (Interrupted, KeyboardInterrupt) as err:
        where = args.teachers_dir or spec.output_dir
        print(f"interrupted: rerun the same command to resume (complete members in {where} are kept)",
              file=sys.stderr)
        return getattr(err, "exit_code", 130)
    print((teacher_dir / SUMMARY_MD).read_text(encoding="utf-8"))
    print(f"teacher directory: {teacher_dir}")
    return 0


def cli() -> None:
    """Console-script entry point (``mtdnn-teachers``)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
