"""``python -m mtdnn <command> [flags]``: the one command (:mod:`mtdnn.cli.main`)."""

from .cli.main import cli

if __name__ == "__main__":
    cli()
