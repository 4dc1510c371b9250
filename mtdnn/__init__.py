"""mtdnn: multi-task learning and knowledge distillation of transformer encoders (MT-DNN, MT-DNN-KD).

The subpackages follow the pipeline, and a lower stage never imports a higher one:
task definitions, data and schedules (:mod:`mtdnn.tasks`) -> encoder, heads, losses and metrics
(:mod:`mtdnn.modeling`) -> Lightning module, Trainer, run directory and export (:mod:`mtdnn.training`)
-> teachers, soft targets and student (:mod:`mtdnn.distillation`); evaluate, predict and transfer
(:mod:`mtdnn.evaluation`). ``python -m mtdnn.<command>`` runs each command.
"""

__version__ = "0.1.0"
