"""Whether an interrupted run can be resumed with the settings given: its configuration and world size."""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError, ConfigError
from ..fileio import read_yaml
from .config import RESOLVED_KEY

RESUME_MAY_DIFFER = frozenset({
    "output_dir", "checkpoint_every_n_steps", "num_workers", "accelerator", "compile", "keep_last_checkpoint",
    "loggers", "progress_every_n_steps", "export_hf",
    # where the data and task definitions lie may change; their content is compared (data_fingerprint, tasks)
    "data_dir", "task_defs",
})
"""Settings of ``config.yaml`` that do not change what is trained; every other one must match on ``resume``."""


def check_resumable(run_dir: Path, document: dict) -> Path:
    """The checkpoint to resume from, after checking that the run is incomplete and that its ``config.yaml``
    matches ``document`` (the one this run would write) in every setting that changes training.

    Every field is compared, the ``resolved`` section too (task definitions, encoder, the data's fingerprint),
    except :data:`RESUME_MAY_DIFFER`; all differences are named at once.

    Raises:
        CheckpointError: no such run, the run is complete, no last.ckpt, or the checkpoint or configuration is
            damaged or not a training run's.
        ConfigError: a setting or the data differs from the interrupted run's.
    """
    # keeps torch out of import time
    from .runs import CHECKPOINT_DIR, CONFIG_FILE, config_differences, load_checkpoint_file, read_metrics

    if read_metrics(run_dir) is not None:
        raise CheckpointError(f"{run_dir}: the run is complete; nothing to resume")
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    config_path = run_dir / CONFIG_FILE
    if not last.is_file() or not config_path.is_file():
        raise CheckpointError(f"{run_dir}: no interrupted run to resume (need {CONFIG_FILE} and {last.name})")
    load_checkpoint_file(last)  # a truncated or damaged checkpoint is reported here, before anything starts
    saved = read_yaml(config_path, CheckpointError, "run configuration")
    command = document[RESOLVED_KEY]["command"]
    if not isinstance(saved, dict) or not isinstance(saved.get(RESOLVED_KEY), dict) or \
            saved[RESOLVED_KEY].get("command") != command:
        raise CheckpointError(f"{config_path}: not the configuration of a '{command}' run written by this version "
                              "(a TrainConfig with a 'resolved' section)")
    differences = [d for d in config_differences(saved, document) if d[0] not in RESUME_MAY_DIFFER]
    if differences:
        shown = "; ".join(f"{_setting_name(key)}: now {now!r}, the interrupted run used {was!r}"
                          for key, was, now in differences[:8])
        more = f" (and {len(differences) - 8} more)" if len(differences) > 8 else ""
        raise ConfigError(f"--resume: {config_path}: the interrupted run was trained with other settings: "
                          f"{shown}{more}. Resume with the same settings and data, or start a new run")
    return last


def _setting_name(key: str) -> str:
    """``lr`` -> ``--lr``; keys of the ``resolved`` section as they are (``resolved.data_fingerprint.rte.train``)."""
    return key if "." in key else "--" + key.replace("_", "-")


def check_world_size(checkpoint: Path, world_size: int) -> None:
    """Refuse to resume ``checkpoint`` with another number of processes than the run that saved it (each rank's
    data shard and random state belong to one world size). Checkpoints saved before the world size was recorded
    pass.

    Raises:
        ConfigError: naming the saved and the requested world size.
    """
    # keeps torch out of import time
    from .runs import load_checkpoint_file

    saved = load_checkpoint_file(checkpoint).get("mtdnn", {}).get("world_size")
    if saved is not None and int(saved) != int(world_size):
        raise ConfigError(f"--resume: {checkpoint} was saved by a run of {saved} process(es) (world size {saved}), "
                          f"and this run would have {world_size} (world size {world_size}, from --devices and "
                          f"--num-nodes); resume with the same --devices and --num-nodes, or start a new run")
