"""Few-shot transfer (arXiv 1901.11504, 4.4): fine-tune encoders on seeded nested subsets of a task's data.

The command is ``python -m mtdnn.transfer`` (:mod:`mtdnn.cli.transfer`, which documents the method and its
outputs, validates the flags and runs the sweep and the report). One module per job:

| module | job |
|---|---|
| :mod:`.settings` | :class:`TransferSettings`, the fine-tuning hyper-parameters shared by every run |
| :mod:`.encoders` | ``--encoders`` items resolved to :class:`Encoder` (packaged, Hugging Face, or a run) |
| :mod:`.finetune` | one (encoder, size, seed): :func:`fine_tune`, then :func:`evaluate_split` once |
| :mod:`.sweep` | every (encoder, size, seed), with the ``per_run/`` resume cache |
| :mod:`.report` | ``results.json``, ``results.md`` and ``learning_curve.png`` |
| :mod:`.spec` | :class:`TransferSpec`, every setting of a sweep (the command's flags) |
| :mod:`.run` | :func:`run_transfer`: validate a spec, sweep, report |
"""

from .encoders import Encoder, parse_encoder_list, resolve_encoder_spec, reused_head_state
from .finetune import evaluate_split, fine_tune
from .report import build_report, plot_learning_curve, render_markdown
from .run import run_transfer
from .settings import SETTINGS, TransferSettings
from .spec import TransferSpec
from .sweep import choose_splits, run_sweep

__all__ = ["SETTINGS", "Encoder", "TransferSettings", "TransferSpec", "run_transfer", "build_report", "choose_splits", "evaluate_split", "fine_tune",
           "parse_encoder_list", "plot_learning_curve", "render_markdown", "resolve_encoder_spec", "reused_head_state",
           "run_sweep"]
