"""``python -m mtdnn.teachers``: the command; the code is in :mod:`mtdnn.distillation.teachers`."""

from .distillation.teachers import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
