"""Choosing a device, and saying clearly why a requested one is not there."""
import os
import platform
import re

import torch

from .text import say

CHOICES = "auto, cpu, cuda, cuda:N, mps, xpu"
MAX_INDEX = 1023  # far more devices than any machine has; larger numbers are typos


class DeviceError(RuntimeError):
    """A device was asked for that is malformed or not available here."""


def best_accelerator() -> torch.device | None:
    """The accelerator torch was built for (CUDA, MPS, XPU, ...) if one is available, else None."""
    if not torch.accelerator.is_available():
        return None
    dev = torch.accelerator.current_accelerator()
    return torch.device(dev.type) if dev.type == "mps" else torch.device(dev.type, 0)


def _visible_note() -> str:
    """CUDA_VISIBLE_DEVICES, when it matters: set to GPUs, or set empty while torch could use CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    unset = visible is None or (visible.strip() == "" and torch.version.cuda is None)
    return "" if unset else f" (CUDA_VISIBLE_DEVICES={visible!r})"


def _problem(kind: str, index: int | None = None) -> str | None:
    """Why ``kind`` (or ``kind:index``) cannot be used here, or None if it can."""
    if kind == "cuda" and torch.version.cuda is None:
        return say("device.no_cuda_build", version=torch.__version__)
    if kind == "cuda" and not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = visible is not None and visible.strip() in ("", "-1")
        return say("device.none_visible" if hidden else "device.no_gpu", note=_visible_note())
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        return say("device.no_such_cuda", index=index, count=count, last=count - 1, note=_visible_note())
    if kind == "mps" and not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        return say("device.mps_unsupported") if built else say("device.no_mps_build", system=platform.system())
    if kind == "xpu" and not torch.xpu.is_available():
        return say("device.no_xpu")
    if kind == "xpu" and index is not None and index >= torch.xpu.device_count():
        return say("device.xpu_count", count=torch.xpu.device_count())
    return None


def pick_device(want="auto") -> torch.device:
    """The device to train on: for ``"auto"`` the best accelerator, else the CPU; any other choice
    (``"cuda:1"``, a ``torch.device`` ...) only if it is really there, else a DeviceError says why."""
    if isinstance(want, str) and want.strip().lower() == "auto":
        return best_accelerator() or torch.device("cpu")
    if not isinstance(want, (str, torch.device)):
        raise DeviceError(say("device.bad_type", kind=type(want).__name__, choices=CHOICES))
    want = str(want)  # checked before torch sees it (no overflow, no wrap-around; torch.device("cpu", 1) refused)
    m = re.fullmatch(r"\s*(cpu|cuda|mps|xpu)(?::(\d{1,4}))?\s*", want.lower())
    kind, digits = m.groups() if m else (None, None)
    index = int(digits) if digits else None
    if not m or (index is not None and (index > MAX_INDEX or kind in ("cpu", "mps") and index != 0)):
        raise DeviceError(say("device.unknown", want=want[:40], choices=CHOICES))
    problem = _problem(kind, index)
    if problem:
        raise DeviceError(say("device.cannot_use", device=torch.device(kind, index), problem=problem))
    return torch.device(kind) if kind in ("cpu", "mps") else torch.device(kind, index or 0)


def synchronize(device) -> None:
    """Wait until all queued work on ``device`` has finished (no-op on CPU)."""
    device = torch.device(device)
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def describe_devices() -> str:
    """A plain-text report of torch's build and every device it can see."""
    lines = [say("device.torch", version=torch.__version__, cuda=torch.version.cuda or say("device.no"),
                 python=platform.python_version(), system=platform.system(), machine=platform.machine()),
             say("device.cpu", cores=os.cpu_count(), threads=torch.get_num_threads())]
    if torch.version.cuda is not None:
        v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None  # 92400 is 9.24.0
        lines.append(f"cuDNN: {f'{v // 10000}.{v % 10000 // 100}.{v % 100}' if v else say('device.cudnn_missing')}")
    if _visible_note():
        lines.append(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(say("device.cuda", index=i, p=p, gib=p.total_memory / 2**30))
    else:
        lines.append(say("device.cuda_missing", problem=_problem("cuda")))
    lines.append(say("device.mps_available" if torch.backends.mps.is_available() else "device.mps_missing"))
    if torch.xpu.is_available():
        lines.append(say("device.xpu", count=torch.xpu.device_count()))
    lines.append(f"pick_device('auto') -> {pick_device('auto')}")
    return "\n".join(lines)
