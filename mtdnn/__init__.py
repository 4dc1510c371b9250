"""mtdnn: multi-task learning and knowledge distillation of transformer encoders (MT-DNN, MT-DNN-KD).

Pipeline: task definition (:mod:`mtdnn.taskdef`) -> data (:mod:`mtdnn.data`) -> schedule (:mod:`mtdnn.schedule`)
-> shared encoder and heads (:mod:`mtdnn.model`, :mod:`mtdnn.heads`) -> losses and metrics -> Lightning
(:mod:`mtdnn.lightning`) -> run directory and export (:mod:`mtdnn.runs`, :mod:`mtdnn.export`).
"""

__version__ = "0.1.0"
