"""``python -m mtdnn.train``: the command; the code is in :mod:`mtdnn.training.trainer`."""

from .training.trainer import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
