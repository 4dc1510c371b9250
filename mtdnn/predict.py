"""``python -m mtdnn.predict``: the command (:mod:`mtdnn.cli.predict`); the code is in :mod:`mtdnn.evaluation.predict`."""

from .cli.predict import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
