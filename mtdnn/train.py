"""``python -m mtdnn.train``: the command (:mod:`mtdnn.cli.train`); the training is :func:`mtdnn.training.trainer.fit`."""

from .cli.train import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
