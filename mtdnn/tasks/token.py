"""Kept only for ``mtdnn/training/trainer.py``'s import of :func:`article_lists`, which now lives in
:mod:`mtdnn.tasks.data`; remove once that import names :mod:`mtdnn.tasks.data` (the token-level types are
:mod:`mtdnn.tasktypes.tagging` and :mod:`mtdnn.tasktypes.spans`)."""

from .data import article_lists

__all__ = ["article_lists"]
