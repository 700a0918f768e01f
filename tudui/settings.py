"""Run settings for the lessons: quick on a CPU or in tests, the real thing on a GPU."""
from __future__ import annotations

import os
import sys

from .data import default_source
from .device import best_accelerator


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def quick_mode() -> bool:
    """Should a lesson train on a small subset for a couple of epochs?

    $TUDUI_QUICK=1/0 decides when set. Otherwise quick when the data is the
    synthetic stand-in or there is no accelerator (a full CIFAR-10 epoch takes
    minutes on a laptop CPU); full size on a GPU with real CIFAR-10.
    """
    flag = os.environ.get("TUDUI_QUICK", "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    if flag in ("0", "false", "no"):
        return False
    return default_source() == "synthetic" or best_accelerator() is None
