"""Few-shot transfer (arXiv 1901.11504, 4.4): fine-tune encoders on seeded nested subsets of a task's data.

The command is ``python -m mtdnn.transfer`` (:mod:`.command`, which documents the method and its outputs). One
module per job:

| module | job |
|---|---|
| :mod:`.settings` | :class:`TransferSettings`, the fine-tuning hyper-parameters shared by every run |
| :mod:`.encoders` | ``--encoders`` items resolved to :class:`Encoder` (packaged, Hugging Face, or a run) |
| :mod:`.finetune` | one (encoder, size, seed): :func:`fine_tune`, then :func:`evaluate_split` once |
| :mod:`.sweep` | every (encoder, size, seed), with the ``per_run/`` resume cache |
| :mod:`.report` | ``results.json``, ``results.md`` and ``learning_curve.png`` |
| :mod:`.command` | the command's flags and its steps: validate, sweep, report |
"""

from .command import build_parser, cli, main
from .encoders import Encoder, parse_encoder_list, resolve_encoder_spec, reused_head_state
from .finetune import evaluate_split, fine_tune
from .report import build_report, plot_learning_curve, render_markdown
from .settings import SETTINGS, TransferSettings
from .sweep import choose_splits, run_sweep

__all__ = ["SETTINGS", "Encoder", "TransferSettings", "build_parser", "build_report", "choose_splits", "cli",
           "evaluate_split", "fine_tune", "main", "parse_encoder_list", "plot_learning_curve", "render_markdown",
           "resolve_encoder_spec", "reused_head_state", "run_sweep"]
