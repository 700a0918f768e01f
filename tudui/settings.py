"""Run settings for the lessons: quick on a CPU or in tests, the real thing on a GPU with real CIFAR-10."""
from __future__ import annotations

import os
import sys

from .data import cifar10_on_disk, default_source
from .device import best_accelerator

QUICK = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def quick_mode(root="data") -> bool:
    """Should a lesson train on a small subset for a couple of epochs?

    $TUDUI_QUICK=1/0 decides when set. Otherwise full size only with an accelerator and real
    CIFAR-10 already in ``root``: a CPU epoch of CIFAR-10 takes minutes, and a GPU machine
    without the data (offline, say) would train on 50,000 synthetic images for nothing.
    """
    raw = os.environ.get("TUDUI_QUICK", "")
    flag = raw.strip().lower()
    if flag:
        if flag not in QUICK:
            raise ValueError(f"TUDUI_QUICK={raw!r} is not understood; set it to 1 (quick) or 0 (full size), "
                             f"or unset it")
        return QUICK[flag]
    full = default_source() != "synthetic" and best_accelerator() is not None and cifar10_on_disk(root)
    return not full
