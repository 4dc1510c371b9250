"""Evaluate, predict and few-shot transfer. Imports :mod:`mtdnn.training` and below.
"""
