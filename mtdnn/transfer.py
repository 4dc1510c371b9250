"""``python -m mtdnn.transfer``: the command (:mod:`mtdnn.cli.transfer`); the code is in :mod:`mtdnn.evaluation.transfer`."""

from .cli import callable_command
from .cli.transfer import cli, main

callable_command(__name__, "transfer")  # mtdnn.transfer(...) is also the API function :func:`mtdnn.api.transfer`

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
