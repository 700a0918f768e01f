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
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(times)


class Stopwatch:
    """``with Stopwatch(device) as sw: ...`` then ``sw.seconds``; synchronises on exit."""

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


def train_step_speed(model, device, batch_size=64, steps=10, lr=1e-2) -> float:
    """Measured training images/s of ``model`` on ``device`` with random data."""
    model = model.to(device)
    x = torch.rand(batch_size, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def steps_fn():
        for _ in range(steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    t = measure(steps_fn, device, repeat=3, warmup=1)
    return batch_size * steps / t.median
