"""The Lightning module and data module, the training run (Trainer, run directory, checkpoints), export,
and loading a run or export for inference. Imports :mod:`mtdnn.modeling` and below.
"""
