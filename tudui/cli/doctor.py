"""``python -m tudui doctor``: what this machine has, what torch can use of it, and the one thing to do.

The parsing and the advice are pure functions of the facts (easy to test with
canned ``nvidia-smi`` outputs); :func:`run` gathers the facts and prints.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

import torch

from ..device import best_accelerator
from ..model import Tudui
from ..timing import measure

WHEELS = "https://download.pytorch.org/whl/"
DRIVER_PAGE = "https://www.nvidia.com/Download/index.aspx"
GPU_SECTION = "README.md, 'Getting a GPU build of torch'"
CHECK = 'python -c "import torch; print(torch.cuda.is_available(), torch.version.cuda)"'
UNINSTALL = "python -m pip uninstall -y torch torchvision"

# CUDA builds of torch on https://download.pytorch.org/whl/cuXYZ, per release. Sources, checked September 2026:
# pytorch.org/get-started/previous-versions (2.7-2.9), the "PyTorch CUDA Support Matrix" in pytorch/pytorch's
# RELEASE.md and its CUDA matrix RFCs (github.com/pytorch/pytorch/issues/172663, /178665, /190355).
#   2.7: 11.8 12.6 12.8 | 2.8: 12.6 12.8 12.9 | 2.9-2.11: 12.6 12.8 13.0 | 2.12-2.14: 12.6 13.0 13.2
CURRENT_BUILDS = ((12, 6), (13, 0), (13, 2))  # each index serves the newest torch (2.14)
LEGACY_BUILD = (11, 8)                        # the last torch with CUDA 11 wheels: 2.7.1
LEGACY_PINS = "torch==2.7.1 torchvision==0.22.1"


@dataclass(frozen=True)
class NvidiaSmi:
    """What ``nvidia-smi`` reports: the GPUs, the driver, and the newest CUDA that driver supports."""
    gpus: tuple
    driver: str
    cuda: tuple | None  # (major, minor), or None when the header could not be read


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: its version, what it was built for, and what it can use now."""
    version: str
    cuda: tuple | None  # torch.version.cuda as (major, minor); None for a CPU-only or ROCm build
    hip: str | None     # torch.version.hip: set for a ROCm (AMD GPU) build
    cuda_available: bool
    mps_available: bool = False


@dataclass(frozen=True)
class Advice:
    case: str       # one of the CASE_* names below
    summary: str    # one line: which situation this is
    steps: tuple    # lines to print; commands stand alone on their line, indented, never wrapped


CASE_WORKS = "gpu-works"
CASE_CPU_BUILD = "cpu-build-with-nvidia-gpu"
CASE_BUILD_TOO_NEW = "build-newer-than-driver"
CASE_DRIVER_TOO_OLD = "driver-too-old"
CASE_GPU_NOT_USABLE = "gpu-not-usable"
CASE_NO_NVIDIA = "no-nvidia-gpu"


def version_tuple(text) -> tuple | None:
    """``"12.7"`` -> ``(12, 7)``; None for None or text without a version."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def dotted(version: tuple) -> str:
    return f"{version[0]}.{version[1]}"


def parse_gpu_query(text: str) -> list:
    """``[(name, driver), ...]`` from ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``."""
    rows = []
    for line in text.splitlines():
        name, sep, driver = line.strip().rpartition(",")
        if sep and name.strip() and re.fullmatch(r"\d+(\.\d+)+", driver.strip()):
            rows.append((name.strip(), driver.strip()))
    return rows


def parse_cuda_version(header: str) -> tuple | None:
    """The ``CUDA Version: 12.7`` of plain ``nvidia-smi``'s header: the newest CUDA the driver supports."""
    m = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", header)
    return version_tuple(m.group(1)) if m else None


def parse_nvidia_smi(query: str, header: str) -> NvidiaSmi | None:
    """Both outputs together; None when the query lists no GPU."""
    rows = parse_gpu_query(query)
    if not rows:
        return None
    return NvidiaSmi(tuple(name for name, _ in rows), rows[0][1], parse_cuda_version(header))


def wheel_tag(cuda: tuple) -> str:
    return f"cu{cuda[0]}{cuda[1]}"


def choose_build(driver_cuda: tuple | None) -> tuple | None:
    """The CUDA build of torch to install for a driver that supports CUDA up to ``driver_cuda``.

    The newest current build the driver supports; else the oldest current one of the
    same major version, which such a driver runs too (NVIDIA's "minor version
    compatibility": a 12.x build needs a 12.0+ driver, >= 525); else, for a CUDA 11
    driver, the 11.8 build of torch 2.7; else None: the driver is too old.
    """
    if driver_cuda is None:
        return CURRENT_BUILDS[0]  # the header was unreadable: the build that asks least of the driver
    supported = [b for b in CURRENT_BUILDS if b <= driver_cuda]
    if supported:
        return supported[-1]
    same_major = [b for b in CURRENT_BUILDS + (LEGACY_BUILD,) if b[0] == driver_cuda[0]]
    return min(same_major) if same_major else None


def install_command(build: tuple) -> str:
    pins = LEGACY_PINS if build == LEGACY_BUILD else "torch torchvision"
    return f"python -m pip install {pins} --index-url {WHEELS}{wheel_tag(build)}"


def why_this_build(build: tuple, driver_cuda: tuple | None) -> str:
    if build == LEGACY_BUILD:
        return (f"torch 2.7's CUDA {dotted(build)} build (the last torch with CUDA 11 builds; "
                "a newer driver gets you the current torch)")
    if driver_cuda is None:
        return f"the CUDA {dotted(build)} build of torch"
    if build <= driver_cuda:
        return f"the CUDA {dotted(build)} build of torch, the newest this driver (CUDA {dotted(driver_cuda)}) supports"
    return f"the CUDA {dotted(build)} build of torch (a CUDA {dotted(driver_cuda)} driver runs any {build[0]}.x build)"


def install_steps(build: tuple, driver_cuda: tuple | None) -> tuple:
    """Uninstall, install the CUDA build, check; and the same inside a conda environment."""
    return (f"Install {why_this_build(build, driver_cuda)}.",
            "First remove the current torch, then install, then check (prints True and the CUDA version):",
            f"    {UNINSTALL}",
            f"    {install_command(build)}",
            f"    {CHECK}",
            "Anaconda: run the same commands inside the activated environment (conda activate NAME);",
            f"PyTorch's own conda channel stopped at torch 2.5. More in {GPU_SECTION}.")


def driver_steps(driver_cuda: tuple | None) -> tuple:
    build = choose_build(driver_cuda)
    lines = [f"Update the NVIDIA driver ({DRIVER_PAGE}), restart, and run this doctor again."]
    if build:
        lines += [f"Or keep the driver and install the CUDA {dotted(build)} build instead:",
                  f"    {UNINSTALL}", f"    {install_command(build)}"]
    else:
        lines.append("If NVIDIA offers no newer driver for this GPU, it is too old for current PyTorch "
                     "builds: train on the CPU (quick mode) or on Colab (notebook 05).")
    return tuple(lines)


def no_gpu_steps(build: TorchBuild, system: str, machine: str) -> tuple:
    lines = ["The CPU is fine for every lesson: they run in quick mode (a few thousand images).",
             "For full-size training, Colab (notebook 05) lends you a free GPU."]
    if system == "Darwin" and machine == "arm64":
        lines.append("This Mac's GPU (device 'mps') needs macOS 12.3 or newer: update macOS to train on it.")
    if build.cuda:
        lines += ["If this machine does have an NVIDIA GPU, install its driver (nvidia-smi comes with it):",
                  f"    {DRIVER_PAGE}"]
    return tuple(lines)


def not_a_cuda_build(build: TorchBuild, smi: NvidiaSmi, system: str) -> Advice:
    """An NVIDIA GPU, and a torch built for the CPU only (or for AMD GPUs)."""
    made = f"built for AMD GPUs (ROCm {build.hip})" if build.hip else "CPU-only"
    chosen = choose_build(smi.cuda)
    if chosen is None:
        return Advice(CASE_DRIVER_TOO_OLD, f"This torch is {made}, and the driver of the {smi.gpus[0]} "
                      f"(CUDA {dotted(smi.cuda)}) is too old for any CUDA build of torch 2.7+.",
                      driver_steps(smi.cuda))
    steps = install_steps(chosen, smi.cuda)
    if system == "Windows" and not build.hip:
        steps = ("(On Windows a plain `pip install torch` installs this CPU-only build.)",) + steps
    return Advice(CASE_CPU_BUILD, f"This machine has an {smi.gpus[0]}, but this torch is {made}.", steps)


def cuda_build_not_working(build: TorchBuild, smi: NvidiaSmi, visible: str | None) -> Advice:
    """A CUDA build of torch and an NVIDIA driver, yet torch.cuda.is_available() is False."""
    if smi.cuda and build.cuda > smi.cuda:
        return Advice(CASE_BUILD_TOO_NEW, f"This torch is a CUDA {dotted(build.cuda)} build, newer than driver "
                      f"{smi.driver} supports (CUDA {dotted(smi.cuda)}): torch cannot use the GPU.",
                      driver_steps(smi.cuda))
    summary = f"torch has CUDA and the driver is new enough, but the {smi.gpus[0]} is not usable."
    if visible is not None and visible.strip() in ("", "-1"):
        return Advice(CASE_GPU_NOT_USABLE, summary, (f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU: unset it.",))
    return Advice(CASE_GPU_NOT_USABLE, summary,
                  ("Read torch's own error message (restart the machine first if the driver was just updated):",
                   '    python -c "import torch; torch.zeros(1).cuda()"'))


def advise(build: TorchBuild, smi: NvidiaSmi | None, system: str = "", machine: str = "",
           visible: str | None = None) -> Advice:
    """Which situation holds, and the one thing to do.

    system, machine: ``platform.system()`` and ``platform.machine()``; visible: $CUDA_VISIBLE_DEVICES.
    """
    if build.cuda_available:
        kind = "ROCm (AMD GPU)" if build.hip else "CUDA"
        return Advice(CASE_WORKS, f"{kind} works: torch trains on the GPU.",
                      ("Nothing to do: the lessons pick the GPU themselves (tudui.pick_device(), --device auto).",))
    if build.mps_available:
        return Advice(CASE_WORKS, "The Apple GPU (MPS) works: torch trains on it as device 'mps'.",
                      ("Nothing to do: the lessons pick it themselves (tudui.pick_device(), --device auto).",))
    if smi is None:
        return Advice(CASE_NO_NVIDIA, "No NVIDIA GPU found (no nvidia-smi), and torch sees no other GPU.",
                      no_gpu_steps(build, system, machine))
    if build.cuda is None:
        return not_a_cuda_build(build, smi, system)
    return cuda_build_not_working(build, smi, visible)


# ---------------------------------------------------------------------------
# Gathering the facts (everything below touches the machine).

def read_nvidia_smi(timeout: float = 10.0) -> NvidiaSmi | None:
    """Run ``nvidia-smi`` if it is on the PATH; None if it is not, fails or lists no GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        query = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=timeout)
        header = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(query.stdout, header.stdout) if query.returncode == 0 else None


def torch_build() -> TorchBuild:
    mps = getattr(torch.backends, "mps", None)
    return TorchBuild(torch.__version__, version_tuple(torch.version.cuda), getattr(torch.version, "hip", None),
                      torch.cuda.is_available(), bool(mps and mps.is_available()))


def describe_build(build: TorchBuild) -> str:
    if build.hip:
        return f"ROCm {build.hip} build (AMD GPUs)"
    return f"CUDA {dotted(build.cuda)} build" if build.cuda else "CPU-only build"


def describe_smi(smi: NvidiaSmi | None) -> str:
    if smi is None:
        return "not found (no NVIDIA driver on the PATH)"
    cuda = f"supports CUDA up to {dotted(smi.cuda)}" if smi.cuda else "CUDA version not shown"
    return f"{', '.join(smi.gpus)}; driver {smi.driver}, {cuda}"


def describe_devices() -> str:
    """The devices torch can use now, e.g. ``cpu (8 threads), cuda:0 (NVIDIA GeForce RTX 3060, 6.0 GiB)``."""
    names = [f"cpu ({torch.get_num_threads()} threads)"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            names.append(f"cuda:{i} ({p.name}, {p.total_memory / 2**30:.1f} GiB)")
    elif best_accelerator() is not None:
        names.append(str(best_accelerator()))
    return ", ".join(names)


WARMUP_STEPS = 3  # untimed: the first steps pay one-off costs (memory, kernel choice, on a GPU its start-up)


def training_speed(device, batch_size: int = 64, steps: int = 10, repeat: int = 5) -> float:
    """Images/s of Tudui training steps on ``device`` (random data).

    ``WARMUP_STEPS`` untimed steps first, then the median of ``repeat`` timings of ``steps`` steps each:
    one-off costs would otherwise dominate a measurement this short.
    """
    model = Tudui().to(device)
    x = torch.rand(batch_size, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def train_steps(n):
        for _ in range(n):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    train_steps(WARMUP_STEPS)
    return batch_size * steps / measure(lambda: train_steps(steps), device, repeat=repeat, warmup=0).median


def speed_lines(accelerator, steps: int) -> list:
    cpu = training_speed("cpu", steps=steps)
    lines = [f"training speed (Tudui, batch 64): cpu {cpu:,.0f} images/s"]
    if accelerator is not None:
        acc = training_speed(accelerator, steps=steps)
        lines.append(f"  {accelerator} {acc:,.0f} images/s: {acc / cpu:.1f}x the CPU")
    return lines


def run(steps: int = 10) -> None:
    """Print the diagnosis: torch build, nvidia-smi, devices, measured speed, and what to do.

    steps: training steps per timed measurement (the median of 5 after a warm-up, on each device).
    """
    build, smi = torch_build(), read_nvidia_smi()
    accelerator = best_accelerator()
    print(f"torch {build.version}: {describe_build(build)}; Python {platform.python_version()} "
          f"on {platform.system()} {platform.machine()}")
    print(f"nvidia-smi: {describe_smi(smi)}")
    print(f"devices torch can use: {describe_devices()}")
    for line in speed_lines(accelerator, steps):
        print(line)
    advice = advise(build, smi, platform.system(), platform.machine(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    print(f"\n{advice.summary}")
    for line in advice.steps:
        print(line)
