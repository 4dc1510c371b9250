"""The multi-task run that a teacher build and a student start from (MT-DNN-KD's first stage): its export, whether
it is a limited run, and the pretrained encoder it was trained from."""

from __future__ import annotations

import logging
from pathlib import Path

from ..errors import CheckpointError
from ..fileio import read_json
from ..training.export import EXPORT_META, is_export_dir, resolve_export
from ..training.runs import CONFIG_FILE, complete_run, read_run_config
from ..training.resolve import run_limits

log = logging.getLogger("mtdnn.teachers")


def multitask_export(run: str | Path, where: str) -> Path:
    """The export of a complete multi-task run (or an export directory itself).

    Raises:
        CheckpointError: prefixed with ``where`` (the spec file and field): no such run, an unfinished run, or
            no export.
    """
    try:
        if not is_export_dir(run):
            complete_run(run)  # says whether the run is missing or unfinished
        return resolve_export(run)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from None


def warn_if_limited(run: str | Path, who: str) -> dict[str, int]:
    """Say (a warning) when ``run`` is a limited run (``--limit-train-examples``/``--limit-eval-examples``), which a
    teacher build or student should rarely start from; return its limits."""
    limits = run_limits(run)
    if limits:
        shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in limits.items())
        log.warning("%s from %s, a LIMITED run (%s): its model saw part of the data; train a full run for results",
                    who, run, shown)
    return limits


def pretrained_encoder(run: Path) -> str:
    """The encoder a training run started from (its ``config.yaml``), else its export's source encoder."""
    if (Path(run) / CONFIG_FILE).is_file():
        encoder = read_run_config(run)[1].get("encoder")
        if encoder:
            return str(encoder)
    meta_path = resolve_export(run) / EXPORT_META
    meta = read_json(meta_path, CheckpointError, "export metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("source_encoder"), str):
        raise CheckpointError(f"{meta_path}: no 'source_encoder' (the export is damaged)")
    return meta["source_encoder"]
