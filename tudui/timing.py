"""Timing work honestly on any device: warm up, synchronise, take turns, take the median (notebook 07)."""
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .device import synchronize
from .text import checked, say


@dataclass
class Timing:
    """Seconds per call from repeated runs (after warm-up)."""
    times: list = field(default_factory=list)
    median = property(lambda self: statistics.median(self.times))
    best = property(lambda self: min(self.times))

    def __str__(self):
        return say("timing.median", ms=self.median * 1e3, n=len(self.times))


def measure(fn, device="cpu", repeat=5, warmup=1) -> Timing:
    """``warmup`` untimed calls of ``fn()`` on ``device``, then ``repeat`` timed, each in a :class:`Stopwatch`."""
    checked(Callable, fn=fn)
    checked(int, 1, repeat=repeat)
    checked(int, 0, warmup=warmup)
    return Timing(interleaved({"fn": fn}, device, rounds=repeat, warmup=warmup)["fn"])  # one run taking turns


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


def interleaved(runs, device, rounds=5, warmup=1):
    """``{name: [seconds, ...]}``: each ``runs[name]()`` timed on ``device`` once per round, taking turns (A B, then
    B A, ...). Slow drift of the machine (clock speed, heat, other programs) then falls on all of them alike."""
    names = list(runs)
    for _ in range(warmup):                       # untimed: one-off costs (workers starting, cuDNN loading)
        for name in names:
            runs[name]()
    seconds = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            with Stopwatch(device) as watch:      # synchronises before starting and before stopping
                runs[name]()
            seconds[name].append(watch.seconds)
    return seconds


def speed_ratio(fast, slow) -> float:
    """How many times as fast ``fast`` is as ``slow`` (seconds from one :func:`interleaved` call): the median of the
    round-by-round ratios, each of runs made side by side."""
    if len(fast) != len(slow):
        raise ValueError(say("timing.unpaired", fast=len(fast), slow=len(slow)))
    return statistics.median(s / f for f, s in zip(fast, slow))
