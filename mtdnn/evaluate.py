"""``python -m mtdnn.evaluate``: the command (:mod:`mtdnn.cli.evaluate`); the code is in :mod:`mtdnn.evaluation.evaluate`."""

from .cli.evaluate import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
