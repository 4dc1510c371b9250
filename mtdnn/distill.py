"""``python -m mtdnn.distill``: the command; the code is in :mod:`mtdnn.distillation.student`."""

from .distillation.student import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
