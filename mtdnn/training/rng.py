"""Random-number-generator states for exact resume: capture, restore, and each DDP rank's own file."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from ..fileio import read_checkpoint, write_torch_atomic


def rng_state() -> dict:
    """Python, NumPy, torch CPU and CUDA RNG states as plain values and tensors (``weights_only``-loadable)."""

    np_state = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"python": list(internal), "python_gauss": gauss_next,
             "numpy": torch.from_numpy(np_state[1].astype("int64")), "numpy_pos": int(np_state[2]),
             "numpy_gauss": [int(np_state[3]), float(np_state[4])], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


RANK_RNG_FILE = "rng-rank{rank}.pt"


def save_rank_rng(directory: Path, rank: int, world_size: int, global_step: int) -> Path:
    """Write this rank's RNG states (:func:`rng_state`) to ``directory/rng-rank<rank>.pt`` atomically, with the
    global step of the checkpoint they belong to and the world size; no collective (every rank writes its own).

    Raises:
        UserError: the file cannot be written (the previous one is kept).
    """

    path = Path(directory) / RANK_RNG_FILE.format(rank=rank)
    write_torch_atomic(path, {"global_step": int(global_step), "world_size": int(world_size), "rank": int(rank),
                              "rng": rng_state()})
    return path


def load_rank_rng(directory: Path, rank: int, global_step: int | None) -> dict | None:
    """This rank's RNG states saved beside a checkpoint of ``global_step`` (:func:`save_rank_rng`); None, with a
    warning that the resumed run will not be exact, when the file is missing, unreadable or of another step."""

    path = Path(directory) / RANK_RNG_FILE.format(rank=rank)

    problem = None
    try:
        saved = read_checkpoint(path) if path.is_file() else None
        if saved is None:
            problem = "it is missing"
        elif "rng" not in saved:
            problem = "not an RNG state file"
        elif global_step is not None and saved.get("global_step") != global_step:
            problem = f"it is of step {saved.get('global_step')}, the checkpoint of step {global_step}"
    except UserError as err:  # truncated or damaged: resume all the same, not exactly
        problem = f"it cannot be read ({err})"
    if problem is not None:
        logging.getLogger("mtdnn.train").warning(
            "rank %d: %s: %s; this rank continues with rank 0's random state, so the resumed run is not exactly "
            "the uninterrupted one", rank, path, problem)
        return None
    return saved["rng"]


def set_rng_state(state: dict) -> None:
    """Inverse of :func:`rng_state`."""

    random.setstate((3, tuple(state["python"]), state["python_gauss"]))
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", state["numpy"].numpy().astype("uint32"), state["numpy_pos"], has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
