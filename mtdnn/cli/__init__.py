"""Command-line glue, one module per command: parse flags, build the config or spec, call the API, print.

Nothing else lives here: every command's work is a function of the stages below (:mod:`mtdnn.training`,
:mod:`mtdnn.distillation`, :mod:`mtdnn.evaluation`), also reachable from Python (:mod:`mtdnn.api`).
:func:`mtdnn.errors.run_cli` maps a :class:`~mtdnn.errors.UserError` to exit code 2 and an
:class:`~mtdnn.errors.Interrupted` run to 130/143. ``python -m mtdnn.<command>`` runs each one.
"""

import sys
import types


def callable_command(module_name: str, api_function: str) -> None:
    """Make the entry-point module ``module_name`` callable as the API function of the same name.

    ``mtdnn.distill`` and ``mtdnn.transfer`` are both the ``python -m`` entry points (modules) and API functions;
    importing a submodule sets the package attribute to the module, so the module itself forwards calls:
    ``mtdnn.distill(spec)`` works whether or not ``mtdnn.distill`` was imported as a module first.
    """

    class Command(types.ModuleType):
        def __call__(self, *args, **kwargs):
            # keeps torch out of import time
            from .. import api

            return getattr(api, api_function)(*args, **kwargs)

    sys.modules[module_name].__class__ = Command
