"""``python -m mtdnn.evaluate``: the command; the code is in :mod:`mtdnn.evaluation.evaluate`."""

from .evaluation.evaluate import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
