"""``python -m mtdnn.teachers``: the command (:mod:`mtdnn.cli.teachers`); the build is :mod:`mtdnn.distillation.teachers`."""

from .cli.teachers import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
