"""MT-DNN-KD's second stage: teacher specs and builds, cached soft targets, the student. Imports
:mod:`mtdnn.training` and below.
"""
