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

import importlib

# name -> the submodule that defines it; imported on first use, so that the command's --help and its spec
# (:mod:`.spec`, :mod:`.settings`) import no torch (the fine-tune and the sweep do)
_EXPORTS = {
    "Encoder": "encoders", "parse_encoder_list": "encoders", "resolve_encoder_spec": "encoders",
    "reused_head_state": "encoders", "evaluate_split": "finetune", "fine_tune": "finetune",
    "build_report": "report", "plot_learning_curve": "report", "render_markdown": "report",
    "run_transfer": "run", "SETTINGS": "settings", "TransferSettings": "settings", "TransferSpec": "spec",
    "choose_splits": "sweep", "run_sweep": "sweep",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
