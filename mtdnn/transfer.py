"""``python -m mtdnn.transfer``: the command; the code is in :mod:`mtdnn.evaluation.transfer`."""

from .evaluation.transfer import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
