"""``python -m mtdnn.distill``: the command (:mod:`mtdnn.cli.distill`); the student is :mod:`mtdnn.distillation.student`."""

from .cli import callable_command
from .cli.distill import cli, main

callable_command(__name__, "distill")  # mtdnn.distill(...) is also the API function :func:`mtdnn.api.distill`

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
