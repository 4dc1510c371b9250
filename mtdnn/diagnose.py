"""``python -m mtdnn.diagnose``: the command; the code is in :mod:`mtdnn.evaluation.diagnostics`."""

from .evaluation.diagnostics.command import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
