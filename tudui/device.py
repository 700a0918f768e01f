"""Choosing a device, and saying clearly why a requested one is not there."""
from __future__ import annotations

import os
import platform
import re

import torch

KINDS = ("cpu", "cuda", "mps", "xpu")
CHOICES = "auto, cpu, cuda, cuda:N, mps, xpu"


class DeviceError(RuntimeError):
    """A device was asked for that is malformed or not available here."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def _xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu and xpu.is_available())


def best_accelerator() -> torch.device | None:
    """The best available accelerator (CUDA, then MPS, then XPU), or None."""
    acc = getattr(torch, "accelerator", None)  # torch >= 2.6
    if acc is not None and acc.is_available():
        dev = acc.current_accelerator()
        return torch.device(dev.type, 0) if dev.type in ("cuda", "xpu") else torch.device(dev.type)
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if _mps_available():
        return torch.device("mps")
    if _xpu_available():
        return torch.device("xpu", 0)
    return None


def _parse(want) -> torch.device:
    if isinstance(want, torch.device):
        want = str(want)  # checked like its name, so torch.device("cpu", 1) is refused too
    if not isinstance(want, str):
        raise DeviceError(f"device must be a string or torch.device, not {type(want).__name__}; choose one of: {CHOICES}")
    m = re.fullmatch(r"\s*(cpu|cuda|mps|xpu)(?::(\d+))?\s*", want.lower())
    if not m or (m.group(2) is not None and m.group(1) in ("cpu", "mps") and m.group(2) != "0"):
        raise DeviceError(f"unknown device {want!r}; choose one of: {CHOICES}")
    kind, index = m.group(1), m.group(2)
    return torch.device(kind, int(index)) if index is not None else torch.device(kind)


def _cuda_problem(index: int | None) -> str | None:
    """Why cuda (or cuda:index) cannot be used here, or None if it can."""
    if torch.version.cuda is None:
        return (f"this torch ({torch.__version__}) was built without CUDA; "
                "install a CUDA build of torch (see pytorch.org/get-started)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    if not torch.cuda.is_available():
        if visible is not None and visible.strip() in ("", "-1"):
            return f"no CUDA device is visible{shown}"
        return ("torch has CUDA but found no usable GPU: no NVIDIA driver or no GPU"
                f"{shown}; check `nvidia-smi` (on Colab: Runtime > Change runtime type > GPU)")
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        return f"cuda:{index} does not exist: {count} CUDA device(s) visible, cuda:0..cuda:{count - 1}{shown}"
    return None


def pick_device(want="auto") -> torch.device:
    """Return the device to train on.

    ``"auto"`` picks the best available accelerator, else the CPU. Any other
    choice (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, ``"xpu"`` or a
    ``torch.device``) is returned only if it is really there; otherwise a
    DeviceError says why. A specific request never falls back to the CPU.
    """
    if isinstance(want, str) and want.strip().lower() == "auto":
        return best_accelerator() or torch.device("cpu")
    dev = _parse(want)
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "cuda":
        problem = _cuda_problem(dev.index)
        if problem:
            raise DeviceError(f"cannot use {dev}: {problem}")
        return torch.device("cuda", dev.index or 0)
    if dev.type == "mps":
        if not _mps_available():
            built = getattr(torch.backends, "mps", None) and torch.backends.mps.is_built()
            why = ("this torch has MPS but the machine does not support it (needs Apple silicon and macOS 12.3+)"
                   if built else f"this torch was built without MPS (MPS needs a Mac; this is {platform.system()})")
            raise DeviceError(f"cannot use mps: {why}")
        return torch.device("mps")
    if dev.type == "xpu":
        if not _xpu_available():
            raise DeviceError("cannot use xpu: no Intel GPU available to this torch")
        count = torch.xpu.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceError(f"cannot use {dev}: {count} XPU device(s) visible")
        return torch.device("xpu", dev.index or 0)
    raise DeviceError(f"unknown device {want!r}; choose one of: {CHOICES}")  # pragma: no cover


def synchronize(device) -> None:
    """Wait until all queued work on ``device`` has finished (no-op on CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def describe_devices() -> str:
    """A plain-text report of torch's build and every device it can see."""
    lines = [f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}), "
             f"Python {platform.python_version()} on {platform.system()} {platform.machine()}",
             f"CPU: {os.cpu_count()} logical cores, torch uses {torch.get_num_threads()} threads"]
    if torch.version.cuda is not None:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        lines.append(f"cuDNN: {cudnn or 'not available'}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        lines.append(f"CUDA_VISIBLE_DEVICES={visible!r}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"cuda:{i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, "
                         f"compute capability {p.major}.{p.minor}")
    else:
        lines.append(f"CUDA: not available ({_cuda_problem(None)})")
    lines.append(f"MPS (Apple GPU): {'available' if _mps_available() else 'not available'}")
    if _xpu_available():
        lines.append(f"XPU (Intel GPU): {torch.xpu.device_count()} device(s)")
    lines.append(f"pick_device('auto') -> {pick_device('auto')}")
    return "\n".join(lines)
