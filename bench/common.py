"""Helpers shared by the benchmarks: step clocks, peak memory, atomic JSON, model FLOPs, the matmul ceiling.

Only the standard library and torch (imported where needed): the GPU machine has a minimal environment.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's peak resident set in MiB: ``VmHWM`` (Linux), else ``ru_maxrss``.

    ``VmHWM`` belongs to the process's own address space; ``ru_maxrss`` can carry over the peak of the forked
    copy of the parent that existed before ``exec``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ------------------------------------------------------------------------------------------------ step timing


class StepClock:
    """What each optimizer step trained on and when it began and ended (``time.perf_counter``)."""

    def __init__(self):
        self.begins: list[float] = []
        self.ends: list[float] = []
        self.examples: list[int] = []
        self.real_tokens: list[int] = []
        self.padded_tokens: list[int] = []

    def add_batch(self, attention_mask) -> None:
        """Count one batch: rows, real tokens (mask ones) and padded tokens (the mask's size)."""
        self.examples.append(int(attention_mask.shape[0]))
        self.real_tokens.append(int(attention_mask.sum()))
        self.padded_tokens.append(int(attention_mask.numel()))

    def summary(self, warmup: int) -> dict:
        """Throughput of the steps after the first ``warmup`` ones.

        The timed span runs from the end of step ``warmup`` to the end of the last step, so it holds everything
        the training loop does between steps (loading and collating batches included).

        Raises:
            SystemExit: too few steps, or batches counted do not match the steps taken.
        """
        steps = len(self.ends)
        if steps <= max(warmup, 1):
            raise SystemExit(f"only {steps} optimizer steps: need more than the {warmup} warm-up steps "
                             "(raise --limit-train-examples)")
        if len(self.examples) != steps or len(self.begins) != steps:
            raise SystemExit(f"counted {len(self.examples)} batches and {len(self.begins)} step starts for "
                             f"{steps} optimizer steps")
        start = self.ends[warmup - 1] if warmup > 0 else self.begins[0]
        seconds = self.ends[-1] - start
        timed = slice(warmup, steps)
        examples, real, padded = (sum(x[timed]) for x in (self.examples, self.real_tokens, self.padded_tokens))
        return {"steps": steps, "timed_steps": steps - warmup, "seconds": seconds,
                "step_seconds": sum(e - b for b, e in zip(self.begins[timed], self.ends[timed])),
                "examples": examples, "real_tokens": real, "padded_tokens": padded,
                "examples_per_s": examples / seconds, "tokens_per_s": real / seconds,
                "padded_tokens_per_s": padded / seconds, "padding_share": 1 - real / padded,
                "total_examples": sum(self.examples), "total_real_tokens": sum(self.real_tokens)}


def write_json_file(path: str, obj: dict) -> None:
    """Write ``obj`` as JSON through a temporary file and a rename (``mtdnn.runs`` would import Lightning)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def matmul_tflops(torch, device, size: int, repeats: int = 20) -> float:
    """Median TFLOP/s of a ``size``-cubed bf16 matrix product on random data (the ceiling for the ratio)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    c = torch.empty(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b, out=c)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b, out=c)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            times.append(time.perf_counter() - t)
    return 2 * size**3 / statistics.median(times) / 1e12
