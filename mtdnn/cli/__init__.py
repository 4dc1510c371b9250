"""Command-line glue, one module per command: parse flags, build the config or spec, call the API, print.

Nothing else lives here: every command's work is a function of the stages below (:mod:`mtdnn.training`,
:mod:`mtdnn.distillation`, :mod:`mtdnn.evaluation`), also reachable from Python (:mod:`mtdnn.api`).
:func:`mtdnn.errors.run_cli` maps a :class:`~mtdnn.errors.UserError` to exit code 2 and an
:class:`~mtdnn.errors.Interrupted` run to 130/143. ``python -m mtdnn.<command>`` runs each one.
"""

import inspect
import sys
import types


def callable_command(module_name: str, api_function: str) -> None:
    """Make the entry-point module ``module_name`` callable as the API function of the same name.

    ``mtdnn.distill`` and ``mtdnn.transfer`` are both the ``python -m`` entry points (modules) and API functions;
    importing a submodule sets the package attribute to the module, so the module itself forwards calls:
    ``mtdnn.distill(spec)`` works whether or not ``mtdnn.distill`` was imported as a module first, and carries
    the function's ``__signature__``, ``__doc__`` and ``__wrapped__`` (read on first use, which imports the API),
    so that ``inspect.signature`` and ``help`` show the API function.
    """

    def function():
        # keeps torch out of import time
        from .. import api

        return getattr(api, api_function)

    class Command(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return function()(*args, **kwargs)

        @property
        def __signature__(self):  # inspect.signature(mtdnn.distill): the API function's, not (*args, **kwargs)
            return inspect.signature(function())

        @property
        def __doc__(self):  # help(mtdnn.distill): the API function's docstring
            return function().__doc__

        @property
        def __wrapped__(self):
            return function()

    sys.modules[module_name].__class__ = Command
