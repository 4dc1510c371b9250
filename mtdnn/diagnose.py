"""``python -m mtdnn.diagnose``: the command (:mod:`mtdnn.cli.diagnose`); the code is in :mod:`mtdnn.evaluation.diagnostics`."""

from .cli.diagnose import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
