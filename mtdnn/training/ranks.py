"""Which process this is in a distributed run, as the cluster environment Lightning will choose sees it.

Before ``trainer.fit`` starts, the toolkit decides which process tokenizes, prepares the run directory and writes
``config.yaml``: only global rank zero. Lightning picks its cluster environment in this order: torchelastic
(``torchrun``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK``), SLURM (``srun``: ``SLURM_PROCID``,
``SLURM_NTASKS``, ...), LSF, MPI, else its own launcher, which re-launches the command for the other local ranks
with ``LOCAL_RANK`` (and ``NODE_RANK`` per node), so that the global rank is ``NODE_RANK x devices + LOCAL_RANK``.
:func:`process_ranks` asks the same ``lightning_fabric`` environment classes, so the toolkit and Lightning agree.
"""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple


class Ranks(NamedTuple):
    """This process's place in the run: ``global_rank`` in ``[0, world_size)``, ``local_rank`` on its node."""

    global_rank: int
    local_rank: int
    world_size: int
    node_rank: int = 0
    environment: str = "lightning"


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().lstrip("-").isdigit() else default


def process_ranks(devices: int | None = None, num_nodes: int = 1) -> Ranks:
    """The global rank, local rank and world size of this process, from the environment Lightning will detect.

    Args:
        devices: processes per node under Lightning's own launcher (``--devices`` when a count); without it the
            world size there is ``$WORLD_SIZE`` (set by the launcher) or ``num_nodes``, and the global rank of
            a node other than the first counts one process per node before it.
        num_nodes: nodes under Lightning's own launcher (``--num-nodes``).

    Under torchelastic, SLURM, LSF and MPI the environment's own variables decide and both arguments are ignored.
    A ``SLURM_JOB_NAME`` of ``bash`` or ``interactive`` (an interactive allocation) is not SLURM-launched, as for
    Lightning.
    """

    # keeps torch out of import time
    from lightning_fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    with warnings.catch_warnings():  # SLURMEnvironment.detect warns when srun exists but was not used
        warnings.simplefilter("ignore")
        for cls, name in ((TorchElasticEnvironment, "torchelastic"), (SLURMEnvironment, "slurm"),
                          (LSFEnvironment, "lsf"), (MPIEnvironment, "mpi")):
            if cls.detect():
                env = cls()
                return Ranks(env.global_rank(), env.local_rank(), env.world_size(), env.node_rank(), name)
    # Lightning's launcher: LightningEnvironment's global rank is only set once the strategy starts, so compute
    # it as the strategy will (node rank x processes per node + local rank).
    # keeps torch out of import time
    from lightning_fabric.plugins.environments import LightningEnvironment

    env = LightningEnvironment()
    local, node = env.local_rank(), env.node_rank()
    per_node = devices if devices else None
    world = _int_env("WORLD_SIZE", 0) or (per_node * num_nodes if per_node else num_nodes)
    if per_node is None:
        per_node = max(1, world // max(1, num_nodes))
    return Ranks(node * per_node + local, local, world, node, "lightning")


def is_global_zero(devices: int | None = None, num_nodes: int = 1) -> bool:
    """Whether this process is global rank zero (see :func:`process_ranks`): the one that prepares and writes the
    run directory before training starts."""
    return process_ranks(devices, num_nodes).global_rank == 0
