"""Run settings for the lessons: quick on a CPU or in tests, the real thing on a GPU with real CIFAR-10."""
import os
import sys
from pathlib import Path

from .data import cifar10_on_disk, default_source
from .device import best_accelerator
from .text import say

QUICK = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
KAGGLE_WORKING = Path("/kaggle/working")    # a Kaggle notebook's output folder
MODELSCOPE_WORKSPACE = Path("/mnt/workspace")  # the working folder of ModelScope's (PAI-DSW) notebooks
AUTODL_DATA_DISK = "/root/autodl-tmp"  # every AutoDL instance's data disk (autodl.com/docs/env, read 2026-12)


def host() -> str | None:
    """Which notebook host runs this: "colab", "kaggle", "autodl", "modelscope", or None anywhere else. Colab
    loads ``google.colab`` into every notebook; Kaggle sets $KAGGLE_KERNEL_RUN_TYPE and has /kaggle/working; AutoDL
    sets $AutoDLContainerUUID and has its data disk; ModelScope's (and PAI-DSW's) notebooks work in /mnt/workspace."""
    if "google.colab" in sys.modules:
        return "colab"
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") and KAGGLE_WORKING.is_dir():
        return "kaggle"
    if os.environ.get("AutoDLContainerUUID") or os.path.isdir(AUTODL_DATA_DISK):  # False where /root is closed
        return "autodl"
    if MODELSCOPE_WORKSPACE.is_dir():
        return "modelscope"
    return None


def quick_mode(root="data") -> bool:
    """Should a lesson train on a small subset for a couple of epochs? $TUDUI_QUICK=1/0 decides when set.
    Otherwise full size only with an accelerator, and real CIFAR-10 already in ``root`` or a cloud notebook
    (:func:`host`), which downloads it: a CPU epoch of CIFAR-10 takes minutes, and on a GPU machine without the
    data (offline, say) :func:`tudui.cifar10` would stop: a full-size run never trains on the synthetic stand-in."""
    raw = os.environ.get("TUDUI_QUICK", "")
    flag = raw.strip().lower()
    if flag:
        if flag not in QUICK:
            raise ValueError(say("settings.bad_quick", raw=raw))
        return QUICK[flag]
    full = (default_source() != "synthetic" and best_accelerator() is not None
            and (cifar10_on_disk(root) or host() is not None))
    return not full
