"""``python -m tudui doctor``: what this machine has, what torch can use of it, and the one thing to do.
Parsing and advice are pure functions of the facts (tested with canned nvidia-smi outputs); run() gathers and prints."""
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from itertools import zip_longest

import torch

from .. import text
from ..device import best_accelerator
from ..model import Tudui
from ..text import one_line
from ..timing import measure
from . import builds

DRIVER_PAGE = "https://www.nvidia.com/Download/index.aspx"
CHECK = ("python -c \"import torch; print(torch.cuda.is_available(), torch.version.cuda, "
         "torch.ones(1, device='cuda') + 1)\"")  # the last part runs a real kernel
UNINSTALL = "python -m pip uninstall -y torch torchvision"
TRY_CUDA = 'python -c "import torch; torch.zeros(1).cuda()"'  # shows torch's own error
SMI_TIMEOUT = 10.0  # seconds for each nvidia-smi call
QUERY, CSV = "--query-gpu=name,driver_version", "--format=csv,noheader"
R580_CUDA = (13, 0)  # driver branch 580's: the last for Maxwell, Pascal and Volta (NVIDIA's deprecation notice, 2025)
NO_KERNEL = ("no kernel image", "not compatible with the current PyTorch", "does not include kernels")
GPU_ROW = re.compile(r"(?P<name>.+?),\s*(?P<driver>\d+(?:\.\d+)+)\s*(?:,\s*(?P<cap>[^,]*))?")  # a row of QUERY CSV
WARMUP_STEPS = 3  # untimed: the first steps pay one-off costs (memory, kernel choice, on a GPU its start-up)
CASE_WORKS, CASE_CPU_BUILD, CASE_BUILD_TOO_NEW, CASE_DRIVER_TOO_OLD = (
    "gpu-works", "cpu-build-with-nvidia-gpu", "build-newer-than-driver", "driver-too-old")
CASE_NO_KERNELS, CASE_GPU_NOT_USABLE, CASE_SMI_FAILED, CASE_NO_NVIDIA = (
    "build-without-kernels-for-gpu", "gpu-not-usable", "nvidia-smi-failed", "no-nvidia-gpu")
PYTHON = sys.version_info[:2]  # the advice is for the Python running this: a build must have wheels for it


@dataclass(frozen=True)
class NvidiaSmi:
    """What ``nvidia-smi`` reports: the GPUs, the driver, and the newest CUDA that driver supports."""
    gpus: tuple
    driver: str
    cuda: tuple | None  # (major, minor), or None when the header could not be read
    caps: tuple = ()    # each GPU's compute capability (major, minor); () when this nvidia-smi does not report it


@dataclass(frozen=True)
class SmiFailure:
    """``nvidia-smi`` is there but did not work."""
    code: int | None  # its exit code; None when it did not finish or could not start
    message: str


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: its version, what it was built for, and what it can use now."""
    version: str
    cuda: tuple | None  # torch.version.cuda as (major, minor); None for a CPU-only or ROCm build
    hip: str | None     # torch.version.hip: set for a ROCm (AMD GPU) build
    cuda_available: bool
    mps_available: bool = False
    arch_list: tuple = ()           # torch.cuda.get_arch_list(): the GPU architectures it has kernels for
    caps: tuple = ()                # the compute capability of each GPU torch sees
    kernel_error: str | None = None  # what a convolution on a GPU raised (or torch warned); None: it ran


@dataclass(frozen=True)
class Advice:
    case: str       # one of the CASE_* names above
    summary: str    # one line: which situation this is
    steps: tuple    # lines to print; commands stand alone on their line, indented, never wrapped


def texts(lang: str) -> dict:
    """The templates in ``lang`` ("en" or "zh"), the doctor's among them (tudui/text/doctor.json: short names;
    commands, URLs and versions are filled in by the code and stay as they are)."""
    return text.tables()[text.check_lang(lang)]


def version_tuple(text) -> tuple | None:
    """``"12.7"`` -> ``(12, 7)``; None for None or text without a version; a ValueError for a number no GPU, driver
    or CUDA has (more than two digits on either side: 5,000 digits would not even become an int)."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    if m and max(len(m.group(1)), len(m.group(2))) > 2:
        raise ValueError(one_line(m.group(0), 20))
    return (int(m.group(1)), int(m.group(2))) if m else None


def dotted(version: tuple) -> str:
    return f"{version[0]}.{version[1]}"


def summarise(items, t: dict, shown: int = 3) -> str:
    """``a, b, c and 5 more``: a list that stays on one line however long it is."""
    more = len(items) - shown
    return t["comma"].join(items[:shown]) + (t["more"].format(more=more) if more > 0 else "")


def gpu_label(gpu: str, cap: tuple | None, t: dict) -> str:
    return t["cap"].format(gpu=gpu, cap=dotted(cap)) if cap else gpu


def parse_gpu_query(text: str) -> list:
    """``[(name, driver, cap), ...]`` from ``nvidia-smi QUERY[,compute_cap] CSV``; cap is None without that field."""
    rows = [GPU_ROW.fullmatch(line.strip()) for line in text.splitlines()]
    return [(one_line(m["name"]), m["driver"], version_tuple(m["cap"])) for m in rows if m]


def parse_cuda_version(header: str) -> tuple | None:
    """The ``CUDA Version: 12.7`` of plain ``nvidia-smi``'s header: the newest CUDA the driver supports."""
    m = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", header)
    return version_tuple(m.group(1)) if m else None


def parse_nvidia_smi(query: str, header: str) -> NvidiaSmi | None:
    """Both outputs together; None when the query lists no GPU; an SmiFailure for an impossible number in them."""
    try:
        rows, cuda = parse_gpu_query(query), parse_cuda_version(header)
    except ValueError as exc:  # a driver that reports compute capability 5,000 digits long is not working
        return SmiFailure(None, text.say("absurd", value=exc))
    if not rows:
        return None
    names, drivers, caps = zip(*rows)
    return NvidiaSmi(names, drivers[0], cuda, caps if None not in caps else ())


def missing_kernels(build: TorchBuild, caps: tuple) -> bool:
    """The kernel probe failed for want of kernels, or the arch list (else the table above) misses a GPU in caps."""
    if any(p in (build.kernel_error or "") for p in NO_KERNEL):
        return True
    archs = build.arch_list or builds.kernels_of(build.version, build.cuda)
    return bool(archs and caps) and not all(builds.has_kernels(archs, cap) for cap in caps)


def install_lines(build: builds.Build, t: dict) -> list:
    """Uninstall, then install exactly that build: from PyPI's index, or the same wheels from a mirror."""
    return [f"    {UNINSTALL}", f"    {build.install()}", t["mirror"], f"    {build.install('nju')}"]


def install_steps(build: builds.Build, driver_cuda: tuple | None, caps: tuple, t: dict) -> tuple:
    """Why this build; uninstall, install it, check."""
    why = t["why_plain"] if driver_cuda is None else t["why_runs" if build.cuda <= driver_cuda else "why_minor"]
    why = why.format(cuda=dotted(build.cuda), driver=driver_cuda and dotted(driver_cuda), major=build.cuda[0])
    lines = [t["install"].format(torch=build.torch, python=build.python, why=why)]
    newest_driver = R580_CUDA if caps and min(caps) < (7, 5) else (99, 9)  # the newest driver these GPUs can have
    best = builds.choose(newest_driver, caps, PYTHON)
    if best and best.torch != build.torch or driver_cuda and build.cuda > driver_cuda:
        lines.insert(0, t["best_driver"].format(page=DRIVER_PAGE))
    elif build.torch != builds.newest():
        lines.append(t["last_torch"].format(torch=build.torch, newest=builds.newest(), checked=builds.TABLE["checked"]))
    return (*lines, t["remove_first"], *install_lines(build, t), f"    {CHECK}", t["anaconda"])


def driver_steps(driver_cuda: tuple | None, caps: tuple, t: dict) -> tuple:
    lines = [t["update_driver"].format(page=DRIVER_PAGE)]
    build, after = builds.choose(driver_cuda, caps, PYTHON), caps and builds.choose(R580_CUDA, caps, PYTHON)
    if build:
        return (*lines, t["keep_driver"].format(cuda=dotted(build.cuda), torch=build.torch), *install_lines(build, t))
    return (*lines, t["branch_580"].format(cuda=dotted(after.cuda)) if after else t["too_old_gpu"])


def no_gpu_steps(build: TorchBuild, system: str, machine: str, t: dict) -> tuple:
    lines = [t["cpu_is_fine"], t["free_gpu"]]
    if system == "Darwin" and machine == "arm64":  # MPS needs macOS 14 since torch 2.9 (pytorch/pytorch#162921)
        lines.append(t["old_macos"].format(macos=builds.mps_macos(build.version)))
    if build.cuda:
        lines += [t["maybe_driver"], f"    {DRIVER_PAGE}"]
    return tuple(lines)


def not_a_cuda_build(build: TorchBuild, smi: NvidiaSmi, system: str, caps: tuple, gpu: str, t: dict) -> Advice:
    """An NVIDIA GPU, and a torch built for the CPU only (or for AMD GPUs)."""
    made = t["made_rocm"].format(hip=build.hip) if build.hip else t["made_cpu"]
    chosen = builds.choose(smi.cuda, caps, PYTHON)
    if chosen is None:
        cuda = f"CUDA {dotted(smi.cuda)}" if smi.cuda else t["cuda_unknown"]
        return Advice(CASE_DRIVER_TOO_OLD, t["driver_too_old"].format(made=made, driver=smi.driver, cuda=cuda, gpu=gpu),
                      driver_steps(smi.cuda, caps, t))
    windows = (t["windows_pip"],) if system == "Windows" and not build.hip else ()
    return Advice(CASE_CPU_BUILD, t["not_cuda"].format(gpu=gpu, made=made),
                  windows + install_steps(chosen, smi.cuda, caps, t))


def cuda_build_not_working(build: TorchBuild, smi: NvidiaSmi, visible: str | None, caps: tuple, t: dict) -> Advice:
    """A CUDA build of torch and an NVIDIA driver, yet no GPU is usable."""
    if smi.cuda and build.cuda > smi.cuda:
        summary = t["too_new"].format(cuda=dotted(build.cuda), driver=smi.driver, driver_cuda=dotted(smi.cuda))
        return Advice(CASE_BUILD_TOO_NEW, summary, driver_steps(smi.cuda, caps, t))
    hidden = visible is not None and visible.strip() in ("", "-1")
    steps = (t["hidden"].format(visible=repr(visible)),) if hidden else (t["read_error"], f"    {TRY_CUDA}")
    return Advice(CASE_GPU_NOT_USABLE, t["not_usable"].format(gpu=smi.gpus[0]), steps)


def smi_failed(failure: SmiFailure, t: dict) -> Advice:
    """nvidia-smi exists but failed: the driver is installed, and not working."""
    what = t["smi_error"].format(message=failure.message) if failure.code is None else t["exited"].format(
        code=failure.code, why=t["not_loaded"] if failure.code == 9 else t["failed"])
    steps = [t["restart"], f"    {DRIVER_PAGE}"]
    if failure.code == 9:
        steps.append(t["secure_boot"])
    elif failure.message and failure.code is not None:
        steps.insert(0, t["it_said"].format(message=failure.message))
    return Advice(CASE_SMI_FAILED, t["smi_failed"].format(what=what), tuple(steps))


def advise(build: TorchBuild, smi, system: str = "", machine: str = "", visible: str | None = None,
           lang: str = "en") -> Advice:
    """Which situation holds, and the one thing to do. smi: an NvidiaSmi, an SmiFailure, or None (no nvidia-smi);
    system, machine: ``platform.system()`` and ``platform.machine()``; visible: $CUDA_VISIBLE_DEVICES; lang: the
    language of the advice, "en" or "zh"."""
    t = texts(lang)
    found = smi if isinstance(smi, NvidiaSmi) else None
    caps = build.caps or (found.caps if found else ())
    gpu = gpu_label(found.gpus[0], caps[0] if caps else None, t) if found else t["gpu"]
    if build.cuda and missing_kernels(build, caps):
        driver_cuda = found.cuda if found else None
        chosen = builds.choose(driver_cuda, caps, PYTHON)
        steps = install_steps(chosen, driver_cuda, caps, t) if chosen else driver_steps(driver_cuda, caps, t)
        return Advice(CASE_NO_KERNELS, t["no_kernels"].format(cuda=dotted(build.cuda), gpu=gpu), steps)
    if build.cuda_available and not build.kernel_error:
        return Advice(CASE_WORKS, t["works"].format(kind=t["rocm"] if build.hip else "CUDA"), (t["nothing_gpu"],))
    if build.mps_available:
        return Advice(CASE_WORKS, t["mps_works"], (t["nothing_mps"],))
    if isinstance(smi, SmiFailure):
        return smi_failed(smi, t)
    if smi is None:
        return Advice(CASE_NO_NVIDIA, t["no_nvidia"], no_gpu_steps(build, system, machine, t))
    if build.cuda is None:
        return not_a_cuda_build(build, smi, system, caps, gpu, t)
    return cuda_build_not_working(build, smi, visible, caps, t)


# Gathering the facts: everything below touches the machine.

def read_nvidia_smi(timeout: float = SMI_TIMEOUT) -> NvidiaSmi | SmiFailure | None:
    """Run ``nvidia-smi`` if it is on the PATH; None if it is not, or lists no GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    smi = functools.partial(subprocess.run, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout)
    try:
        query = smi([exe, QUERY + ",compute_cap", CSV])
        if query.returncode != 0:  # nvidia-smi before about driver 510 rejects the field (exit code 2)
            query = smi([exe, QUERY, CSV])
        if query.returncode != 0:
            return SmiFailure(query.returncode, one_line(query.stdout + query.stderr))
        header = smi([exe])
    except subprocess.TimeoutExpired:
        return SmiFailure(None, f"did not answer within {timeout:.0f} s (the driver is not responding)")
    except OSError as exc:
        return SmiFailure(None, one_line(f"could not start ({exc})"))
    return parse_nvidia_smi(query.stdout, header.stdout)


def probe_kernels() -> str | None:
    """Run one small convolution step (forward and backward) on every CUDA device: None, or the first error."""
    for i in range(torch.cuda.device_count()):
        try:
            conv = torch.nn.Conv2d(3, 4, 3).to(f"cuda:{i}")
            conv(torch.rand(2, 3, 8, 8, device=f"cuda:{i}")).sum().backward()
            torch.cuda.synchronize(i)
        except RuntimeError as exc:  # "CUDA error: no kernel image is available for execution on the device"
            return f"cuda:{i}: {one_line(exc)}"
    return None


def torch_build() -> TorchBuild:
    """The installed torch; with a usable CUDA device, its capabilities, its arch list and the kernel probe."""
    mps = getattr(torch.backends, "mps", None)
    available, caps, archs, error = torch.cuda.is_available(), (), (), None
    if available:
        with warnings.catch_warnings(record=True) as caught:  # torch's capability warning: the advice says it
            warnings.simplefilter("always")
            caps = tuple(torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
            archs, error = tuple(torch.cuda.get_arch_list()), probe_kernels()
        warned = [str(w.message) for w in caught if any(p in str(w.message) for p in NO_KERNEL)]
        error = error or (one_line(warned[0]) if warned else None)
    return TorchBuild(torch.__version__, version_tuple(torch.version.cuda), getattr(torch.version, "hip", None),
                      available, bool(mps and mps.is_available()), archs, caps, error)


def describe_build(build: TorchBuild, lang: str = "en") -> str:
    t = texts(lang)
    if build.hip:
        return t["rocm_build"].format(hip=build.hip)
    return t["cuda_build"].format(cuda=dotted(build.cuda)) if build.cuda else t["cpu_build"]


def describe_smi(smi, lang: str = "en") -> str:
    t = texts(lang)
    if smi is None:
        return t["smi_missing"]
    if isinstance(smi, SmiFailure):
        why = smi.message if smi.code is None else t["exit_code"].format(code=smi.code, message=smi.message)
        return t["smi_failure"].format(why=why)
    gpus = [gpu_label(gpu, cap, t) for gpu, cap in zip_longest(smi.gpus, smi.caps)]
    cuda = t["supports"].format(cuda=dotted(smi.cuda)) if smi.cuda else t["cuda_not_shown"]
    caps = "" if smi.caps else t["no_caps"]
    return t["smi"].format(gpus=summarise(gpus, t), driver=smi.driver, cuda=cuda, caps=caps)


def describe_devices(lang: str = "en") -> str:
    """The devices torch can use now, e.g. ``cpu (8 threads), cuda:0 (NVIDIA GeForce RTX 3060, 6.0 GiB)``."""
    t = texts(lang)
    names = [t["threads"].format(n=torch.get_num_threads())]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            names.append(f"cuda:{i} ({p.name}, {p.total_memory / 2**30:.1f} GiB)")
    elif best_accelerator() is not None:
        names.append(str(best_accelerator()))
    return summarise(names, t, shown=4)


def training_speed(device, batch_size: int = 64, steps: int = 10, repeat: int = 5) -> float:
    """Images/s of Tudui training steps on ``device`` (random data): the median of ``repeat`` timings of ``steps``
    steps, after ``WARMUP_STEPS`` untimed ones (one-off costs would otherwise dominate a measurement this short)."""
    model = Tudui().to(device)
    x, y = torch.rand(batch_size, 3, 32, 32, device=device), torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def train_steps(n):
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    train_steps(WARMUP_STEPS)
    return batch_size * steps / measure(lambda: train_steps(steps), device, repeat=repeat, warmup=0).median


def run(steps: int = 10, lang: str = "en") -> None:
    """Print the diagnosis: torch build, nvidia-smi, devices, measured speed, and what to do. steps: training
    steps per timed measurement on each device; lang: "en" or "zh" (the notebook's or ``--lang``)."""
    t = texts(lang)
    build, smi = torch_build(), read_nvidia_smi()
    accelerator = None if build.kernel_error else best_accelerator()  # no speed test where no kernel runs
    print(t["report_torch"].format(version=build.version, build=describe_build(build, lang), machine=platform.machine(),
                                   python=platform.python_version(), system=platform.system()))
    print(t["report_smi"].format(smi=describe_smi(smi, lang)))
    print(t["report_devices"].format(devices=describe_devices(lang)))
    if build.cuda_available:
        ran = t["kernels_failed"].format(error=build.kernel_error) if build.kernel_error else t["kernels_ran"]
        print(t["report_kernels"].format(result=ran))
    cpu = training_speed("cpu", steps=steps)
    print(t["speed_cpu"].format(speed=cpu))
    if accelerator is not None:
        speed = training_speed(accelerator, steps=steps)
        print(t["speed_gpu"].format(device=accelerator, speed=speed, ratio=speed / cpu))
    advice = advise(build, smi, platform.system(), platform.machine(), os.environ.get("CUDA_VISIBLE_DEVICES"), lang)
    print("\n" + "\n".join((advice.summary, *advice.steps)))
