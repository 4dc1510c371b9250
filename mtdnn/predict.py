"""``python -m mtdnn.predict``: the command; the code is in :mod:`mtdnn.evaluation.predict`."""

from .evaluation.predict import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
