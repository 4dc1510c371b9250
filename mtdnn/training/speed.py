"""Speed settings of training (engineering, not research): attention backend, compilation, CUDA graphs.

Each is behind a flag of ``python -m mtdnn.train`` and off by default:

- ``--sdpa-backend efficient``: scaled-dot-product attention may use the flash and memory-efficient kernels (and
  the math fallback) but not cuDNN's, which builds an execution plan for every new shape (about 1.5 ms of host
  time per call on an H200 whatever the batch, so small batches become host-bound).
- ``--compile`` alone: the batch and sequence dimensions of every batch are marked dynamic, so the encoder is
  compiled once per grad mode (training, evaluation) whatever the task, batch size and length of each step.
- ``--length-buckets 32,64,96,128``: every batch is padded to the shortest bucket that holds it (see
  :class:`~mtdnn.training.datamodule.TaskCollator`). With ``--compile``, the sequence dimension is then marked
  static and the batch dimension dynamic: one graph per bucket (and per grad mode), a bounded set whatever the
  task of each step, and the recompile limit is raised to hold it.
- ``--cuda-graphs`` (GPU, with ``--compile`` and ``--length-buckets``): inductor's ``reduce-overhead`` mode,
  which records one CUDA graph per shape it meets: per bucket and batch size.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError

SDPA_BACKENDS = ("auto", "efficient", "math")


def set_sdpa_backend(name: str) -> None:
    """Choose the kernels ``torch.nn.functional.scaled_dot_product_attention`` may use, for the whole process.

    ``auto``: torch's own choice (flash, memory-efficient, cuDNN, math); ``efficient``: flash and
    memory-efficient (math as the fallback), never cuDNN; ``math``: the reference implementation only.

    Raises:
        ConfigError: an unknown name.
    """
    if name not in SDPA_BACKENDS:
        raise ConfigError(f"--sdpa-backend: unknown backend {name!r} (choose from {', '.join(SDPA_BACKENDS)})")
    cuda = torch.backends.cuda
    cuda.enable_math_sdp(True)
    cuda.enable_flash_sdp(name != "math")
    cuda.enable_mem_efficient_sdp(name != "math")
    cuda.enable_cudnn_sdp(name == "auto")


def parse_buckets(text: str) -> list[int]:
    """``"32,64,128"`` -> ``[32, 64, 128]``; raises ValueError unless positive and strictly ascending."""
    buckets = [int(t) for t in text.split(",") if t.strip()]
    if not buckets or any(b <= 0 for b in buckets) or buckets != sorted(set(buckets)):
        raise ValueError(f"give positive lengths in ascending order, comma-separated (got {text})")
    return buckets


def check_speed_flags(*, buckets: list[int] | None, compile_backend: str | None, cuda_graphs: bool,
                      accelerator: str, longest: int, pad_to_multiple_of: int) -> None:
    """Refuse speed flags that cannot work together, before any file is written.

    Args:
        buckets: ``--length-buckets`` (ascending) or None. compile_backend: ``--compile`` or None.
        cuda_graphs: ``--cuda-graphs``. accelerator: ``--accelerator``. longest: the longest max length of the
            tasks (``--max-length`` or the task definitions). pad_to_multiple_of: ``--pad-to-multiple-of``.

    Raises:
        ConfigError: naming the flags and values that clash, or a ``--compile`` backend torch does not have.
    """
    if buckets:
        if any(b % pad_to_multiple_of for b in buckets):
            raise ConfigError(f"--length-buckets {','.join(map(str, buckets))}: every bucket must be one of the "
                              f"multiples of --pad-to-multiple-of {pad_to_multiple_of}")
        if compile_backend and buckets[-1] < longest:
            raise ConfigError(f"--length-buckets: batches up to {longest} tokens (the tasks' max length) would be "
                              f"longer than the last of --length-buckets ({buckets[-1]}) and each give the compiled "
                              f"encoder a new shape; end the buckets at {longest} or above")
    if compile_backend:
        import torch._dynamo  # lazy: torch._dynamo takes about 2 s to import; only --compile needs it

        backends = torch._dynamo.list_backends(exclude_tags=())
        if compile_backend not in backends:
            raise ConfigError(f"--compile {compile_backend}: not a torch.compile backend here "
                              f"(available: {', '.join(backends)})")
    if cuda_graphs:
        if not compile_backend or compile_backend != "inductor":
            raise ConfigError("--cuda-graphs needs --compile (backend inductor): graphs are recorded by "
                              "inductor's reduce-overhead mode")
        if accelerator not in ("gpu", "cuda", "auto") or (accelerator == "auto" and not torch.cuda.is_available()):
            raise ConfigError(f"--cuda-graphs needs a GPU (--accelerator {accelerator})")
        if not buckets:
            raise ConfigError("--cuda-graphs needs --length-buckets: a graph is recorded per shape, so the set of "
                              "sequence lengths must be bounded")


def compile_encoder(encoder: torch.nn.Module, backend: str, buckets: list[int] | None = None,
                    cuda_graphs: bool = False) -> None:
    """``torch.compile`` the encoder in place (checkpoint keys keep their names: no ``_orig_mod.``).

    With ``buckets``, dynamo may keep one graph per bucket for training and one for evaluation (plus one while
    the batch dimension first turns dynamic): the recompile limit is raised to that. Batches are marked by
    :func:`mark_shapes` (the DataModule's ``mark_shapes`` setting).
    """
    import torch._dynamo  # lazy: torch._dynamo takes about 2 s to import; only --compile needs it

    if buckets:
        needed = 2 * len(buckets) + 4
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, needed)
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * needed)
    encoder.compile(backend=backend, mode="reduce-overhead" if cuda_graphs else None)


SHAPE_MARKS = ("buckets", "dynamic")


def mark_shapes(batch, how: str):
    """Mark the :class:`~mtdnn.tasks.batch.Batch`'s ``(rows, seq_len)`` tensors for dynamo. ``rows`` is always dynamic (the short last batch
    of a task and DDP shards reuse a graph); ``seq_len`` is static with ``how="buckets"`` (one graph per bucket)
    and dynamic with ``how="dynamic"`` (one graph for every length)."""
    import torch._dynamo  # lazy: torch._dynamo takes about 2 s to import; only --compile needs it

    if how not in SHAPE_MARKS:
        raise ValueError(f"mark_shapes: how must be one of {SHAPE_MARKS} (got {how!r})")
    for tensor in (batch.input_ids, batch.attention_mask, batch.token_type_ids):
        if isinstance(tensor, torch.Tensor) and tensor.ndim == 2:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
            if how == "buckets":
                torch._dynamo.mark_static(tensor, 1)
            else:
                torch._dynamo.maybe_mark_dynamic(tensor, 1)
    return batch
