"""Timing work honestly on any device: warm up, synchronise, take the median."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from .device import synchronize


@dataclass
class Timing:
    """Seconds per call from repeated runs (after warm-up)."""
    times: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def __str__(self):
        return f"{self.median * 1e3:.2f} ms (median of {len(self.times)})"


def measure(fn, device="cpu", repeat=5, warmup=1) -> Timing:
    """Time ``fn()`` on ``device``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    GPU work is asynchronous: the Python call returns before the kernels run,
    so we synchronise before starting and before stopping the clock.
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"measure needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        with Stopwatch(device) as sw:
            fn()
        times.append(sw.seconds)
    return Timing(times)


class Stopwatch:
    """``with Stopwatch(device) as sw: ...`` then ``sw.seconds``; synchronises on entry and exit."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        return False

