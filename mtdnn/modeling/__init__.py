"""The shared encoder and its per-task heads, losses and metrics. Imports :mod:`mtdnn.tasks` and below.
"""
