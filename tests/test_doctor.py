"""tudui.doctor: parsing nvidia-smi, the advice for each situation, and the printed report.

The nvidia-smi outputs below are canned (Windows and Linux layouts, new and old
drivers); torch's build is mocked. Nothing here needs a GPU or the network.
"""
import json
import re
import shlex
import subprocess
from importlib import resources

import pytest
import torch
from helpers import fails_in_one_line

from tudui.cli import builds, doctor, main
from tudui.cli.doctor import NvidiaSmi, TorchBuild
from tudui.timing import Timing

WINDOWS_566_HEADER = """\
Tue Dec 10 21:04:11 2024
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 566.36                 Driver Version: 566.36         CUDA Version: 12.7     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                  Driver-Model | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 3060 ...  WDDM  |   00000000:01:00.0  On |                  N/A |
| N/A   45C    P8             12W /   80W |     512MiB /   6144MiB |      3%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
WINDOWS_566_QUERY = "NVIDIA GeForce RTX 3060 Laptop GPU, 566.36\r\n"

LINUX_580_HEADER = """\
Mon Sep 15 10:12:03 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.82.07              Driver Version: 580.82.07      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0 Off |                  Off |
|  0%   38C    P8             21W /  450W |       2MiB /  24564MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA GeForce RTX 4090        Off |   00000000:02:00.0 Off |                  Off |
|  0%   36C    P8             18W /  450W |       2MiB /  24564MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""
LINUX_580_QUERY = "NVIDIA GeForce RTX 4090, 580.82.07\nNVIDIA GeForce RTX 4090, 580.82.07\n"

LINUX_470_HEADER = """\
Wed Mar  6 09:30:41 2024
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  NVIDIA GeForce ...  Off  | 00000000:01:00.0 Off |                  N/A |
| 30%   35C    P8    N/A /  75W |      5MiB /  4040MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""
LINUX_470_QUERY = "NVIDIA GeForce GTX 1050 Ti, 470.256.02\n"

WINDOWS_551_HEADER = WINDOWS_566_HEADER.replace("566.36 ", "551.86 ").replace("Version: 12.7", "Version: 12.4")
WINDOWS_551_QUERY = "NVIDIA GeForce RTX 4080 Laptop GPU, 551.86\n"

WINDOWS = doctor.parse_nvidia_smi(WINDOWS_566_QUERY, WINDOWS_566_HEADER)
LINUX = doctor.parse_nvidia_smi(LINUX_580_QUERY, LINUX_580_HEADER)
OLD = doctor.parse_nvidia_smi(LINUX_470_QUERY, LINUX_470_HEADER)
CUDA_12_4 = doctor.parse_nvidia_smi(WINDOWS_551_QUERY, WINDOWS_551_HEADER)
GTX_780_440 = NvidiaSmi(("GeForce GTX 780",), "440.100", (10, 2))  # a driver too old for any build

CPU_ONLY = TorchBuild("2.14.1+cpu", None, None, cuda_available=False)
CPU_ONLY_PYPI = TorchBuild("2.14.1", None, None, cuda_available=False)
CU130_IDLE = TorchBuild("2.14.1+cu130", (13, 0), None, cuda_available=False)
CU126_IDLE = TorchBuild("2.14.1+cu126", (12, 6), None, cuda_available=False)
CU126_WORKING = TorchBuild("2.14.1+cu126", (12, 6), None, cuda_available=True)
ROCM_IDLE = TorchBuild("2.14.1+rocm7.0", None, "7.0.51831", cuda_available=False)
MAC_MPS = TorchBuild("2.14.1", None, None, cuda_available=False, mps_available=True)


def commands(advice):
    """The command lines of an advice: indented, one per line."""
    return [line.strip() for line in advice.steps if line.startswith("    ")]


def index_urls(advice):
    return [w for c in commands(advice) for w in shlex.split(c) if w.startswith("https://download.pytorch.org")]


# --- parsing --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("smi, gpus, driver, cuda", [
    (WINDOWS, ("NVIDIA GeForce RTX 3060 Laptop GPU",), "566.36", (12, 7)),
    (LINUX, ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"), "580.82.07", (13, 0)),
    (OLD, ("NVIDIA GeForce GTX 1050 Ti",), "470.256.02", (11, 4)),
])
def test_parse_nvidia_smi(smi, gpus, driver, cuda):
    assert smi == NvidiaSmi(gpus, driver, cuda)


def test_parse_ignores_what_is_not_a_gpu_row():
    assert doctor.parse_gpu_query("No devices were found\n") == []
    assert doctor.parse_nvidia_smi("No devices were found\n", "") is None
    assert doctor.parse_cuda_version("NVIDIA-SMI has failed because it couldn't communicate with the driver") is None


def test_header_without_cuda_version_still_gives_gpu_and_driver():
    smi = doctor.parse_nvidia_smi(WINDOWS_566_QUERY, "garbled")
    assert smi.driver == "566.36" and smi.cuda is None


# --- the advice, case by case ---------------------------------------------------------------------------

def test_cpu_build_on_windows_with_a_566_driver_gets_the_cu126_command():
    advice = doctor.advise(CPU_ONLY_PYPI, WINDOWS, "Windows", "AMD64")
    assert advice.case == doctor.CASE_CPU_BUILD
    assert "RTX 3060" in advice.summary and "CPU-only" in advice.summary
    assert "Windows" in advice.steps[0] and advice.steps[1].startswith("Best: update the NVIDIA driver")
    assert "torch 2.14.1" in advice.steps[2] and "which this driver (CUDA 12.7) runs" in advice.steps[2]
    assert commands(advice) == [
        "python -m pip uninstall -y torch torchvision",
        "python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126",
        "python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://mirror.nju.edu.cn/pytorch/whl/cu126",
        """python -c "import torch; print(torch.cuda.is_available(), torch.version.cuda, """
        """torch.ones(1, device='cuda') + 1)\"""",
    ]
    assert any("Anaconda" in line for line in advice.steps)
    assert any("Getting a GPU build of torch" in line for line in advice.steps)


def test_cpu_build_on_linux_with_a_580_driver_gets_cu130():
    advice = doctor.advise(CPU_ONLY, LINUX, "Linux", "x86_64")
    assert advice.case == doctor.CASE_CPU_BUILD
    assert not any("Windows" in line for line in advice.steps)
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu130"]


def test_cpu_build_with_a_cuda_12_4_driver_gets_cu126_by_minor_version_compatibility():
    advice = doctor.advise(CPU_ONLY, CUDA_12_4, "Windows", "AMD64")
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]
    assert "a CUDA 12.4 driver runs any 12.x build" in "\n".join(advice.steps)
    assert advice.steps[1].startswith("Best: update the NVIDIA driver")  # minor-version compatibility comes second


def test_cpu_build_with_a_470_driver_gets_torch_2_7_for_cuda_11_8():
    advice = doctor.advise(CPU_ONLY, OLD, "Linux", "x86_64")
    assert advice.case == doctor.CASE_CPU_BUILD
    assert ("python -m pip install torch==2.7.1 torchvision==0.22.1 --index-url "
            "https://download.pytorch.org/whl/cu118") in commands(advice)
    assert advice.steps[0].startswith("Best: update the NVIDIA driver") and "Python 3.9-3.13" in advice.steps[1]


def test_cpu_build_with_a_driver_too_old_for_any_build():
    advice = doctor.advise(CPU_ONLY, GTX_780_440, "Linux", "x86_64")
    assert advice.case == doctor.CASE_DRIVER_TOO_OLD
    assert doctor.DRIVER_PAGE in advice.steps[0]
    assert commands(advice) == [] and any("free cloud GPU (notebook 05)" in line for line in advice.steps)


def test_rocm_build_on_an_nvidia_machine_is_told_to_install_a_cuda_build():
    advice = doctor.advise(ROCM_IDLE, LINUX, "Linux", "x86_64")
    assert advice.case == doctor.CASE_CPU_BUILD and "ROCm" in advice.summary
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu130"]


def test_cuda_build_newer_than_the_driver():
    advice = doctor.advise(CU130_IDLE, WINDOWS, "Windows", "AMD64")
    assert advice.case == doctor.CASE_BUILD_TOO_NEW
    assert "13.0" in advice.summary and "12.7" in advice.summary and "566.36" in advice.summary
    assert doctor.DRIVER_PAGE in advice.steps[0]
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]


def test_cuda_build_and_a_new_enough_driver_but_no_usable_gpu():
    advice = doctor.advise(CU126_IDLE, WINDOWS, "Windows", "AMD64")
    assert advice.case == doctor.CASE_GPU_NOT_USABLE
    assert commands(advice) == ['python -c "import torch; torch.zeros(1).cuda()"']


def test_gpus_hidden_by_cuda_visible_devices_are_named_as_the_cause():
    advice = doctor.advise(CU126_IDLE, LINUX, "Linux", "x86_64", visible="")
    assert advice.case == doctor.CASE_GPU_NOT_USABLE
    assert "CUDA_VISIBLE_DEVICES" in advice.steps[0]


def test_cuda_works():
    advice = doctor.advise(CU126_WORKING, WINDOWS, "Windows", "AMD64")
    assert advice.case == doctor.CASE_WORKS and "CUDA works" in advice.summary
    assert commands(advice) == []


def test_mps_works():
    assert doctor.advise(MAC_MPS, None, "Darwin", "arm64").case == doctor.CASE_WORKS


@pytest.mark.parametrize("build", [CPU_ONLY, CU130_IDLE])
def test_no_nvidia_gpu(build):
    advice = doctor.advise(build, None, "Windows", "AMD64")
    assert advice.case == doctor.CASE_NO_NVIDIA
    text = "\n".join(advice.steps)
    assert "quick mode" in text and "free GPU (notebook 05)" in text and "mps" not in text
    assert (doctor.DRIVER_PAGE in text) == (build.cuda is not None)  # a CUDA build: maybe only the driver is missing


def test_no_nvidia_gpu_on_apple_silicon_mentions_mps():
    advice = doctor.advise(CPU_ONLY_PYPI, None, "Darwin", "arm64")
    assert any("'mps'" in line for line in advice.steps)


# --- the GPU's compute capability: builds without kernels for it ---------------------------------------

GTX_1060_580 = doctor.parse_nvidia_smi("NVIDIA GeForce GTX 1060 6GB, 580.82.07, 6.1\n", LINUX_580_HEADER)
MX150_470 = doctor.parse_nvidia_smi("NVIDIA GeForce MX150, 472.12, 6.1\r\n",
                                    WINDOWS_566_HEADER.replace("566.36 ", "472.12 ").replace("12.7", "11.4"))
RTX_5070_128 = doctor.parse_nvidia_smi("NVIDIA GeForce RTX 5070, 572.16, 12.0\r\n",
                                       WINDOWS_566_HEADER.replace("566.36 ", "572.16 ").replace("12.7", "12.8"))
RTX_5070_580 = doctor.parse_nvidia_smi("NVIDIA GeForce RTX 5070, 580.82.07, 12.0\n", LINUX_580_HEADER)
RTX_3060_124 = doctor.parse_nvidia_smi("NVIDIA GeForce RTX 3060, 551.86, 8.6\r\n", WINDOWS_551_HEADER)
GTX_1050_TI_566 = doctor.parse_nvidia_smi("NVIDIA GeForce GTX 1050 Ti, 566.36, 6.1\n", WINDOWS_566_HEADER)
CU130_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # the installed cu130 build's arch list
PRE_TURING = tuple(builds.TABLE["kernels"]["maxwell-hopper"])  # the cu126 builds'


def cuda_build(cuda, caps, arch_list=(), kernel_error=None):
    """A CUDA build that torch reports as available, as it does even without kernels for the GPU."""
    return TorchBuild(f"2.14.1+cu{cuda[0]}{cuda[1]}", cuda, None, True, False, arch_list, caps, kernel_error)


def test_compute_capability_is_read_from_the_query():
    assert GTX_1060_580 == NvidiaSmi(("NVIDIA GeForce GTX 1060 6GB",), "580.82.07", (13, 0), ((6, 1),))
    assert RTX_5070_128.caps == ((12, 0),) and RTX_5070_128.cuda == (12, 8)


@pytest.mark.parametrize("arch_list, cap, runs", [
    (CU130_ARCHS, (6, 1), False), (CU130_ARCHS, (7, 5), True), (CU130_ARCHS, (8, 9), True),
    (CU130_ARCHS, (12, 0), True), (PRE_TURING, (12, 0), False), (PRE_TURING, (6, 1), True),
    (("sm_80", "compute_90"), (12, 0), True),  # PTX is compiled for newer GPUs
    (("sm_86",), (8, 0), False),               # binary code runs on its own and newer minor versions only
])
def test_has_kernels(arch_list, cap, runs):
    assert builds.has_kernels(arch_list, cap) is runs


@pytest.mark.parametrize("build", [CPU_ONLY, cuda_build((13, 0), ((6, 1),), CU130_ARCHS)])
def test_gtx_1060_on_a_580_driver_gets_cu126_not_cu130(build):
    advice = doctor.advise(build, GTX_1060_580, "Linux", "x86_64")
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]
    assert "compute capability 6.1" in advice.summary
    assert "torch==2.14.1 torchvision==0.29.1" in commands(advice)[1]  # the last torch with kernels for it, pinned
    assert any(line.startswith("torch 2.14.1 is the last release with kernels for this GPU") for line in advice.steps)
    assert not any(line.startswith("Best: update") for line in advice.steps)  # R580 is this GPU's last driver
    if build.cuda:
        assert advice.case == doctor.CASE_NO_KERNELS and "no kernels for the NVIDIA GeForce GTX 1060" in advice.summary


def test_pascal_with_a_cu130_build_on_an_older_driver_is_sent_straight_to_cu126():
    advice = doctor.advise(CU130_IDLE, GTX_1050_TI_566, "Windows", "AMD64")  # the driver is too old to start it, too
    assert advice.case == doctor.CASE_NO_KERNELS and index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]


def test_mx150_on_a_470_driver_gets_the_driver_first_then_torch_2_7_cu118():
    advice = doctor.advise(CPU_ONLY_PYPI, MX150_470, "Windows", "AMD64")
    assert advice.case == doctor.CASE_CPU_BUILD
    assert advice.steps[1].startswith("Best: update the NVIDIA driver")
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu118"]
    assert "torch==2.7.1 torchvision==0.22.1" in commands(advice)[1]


@pytest.mark.parametrize("build", [CPU_ONLY_PYPI, cuda_build((12, 6), ((12, 0),), PRE_TURING)])
def test_rtx_5070_on_a_12_8_driver_is_told_to_update_the_driver_or_take_the_cu128_route(build):
    advice = doctor.advise(build, RTX_5070_128, "Windows", "AMD64")
    assert advice.case in (doctor.CASE_CPU_BUILD, doctor.CASE_NO_KERNELS)
    assert "RTX 5070 (compute capability 12.0)" in advice.summary
    steps = [line for line in advice.steps if not line.startswith("(On Windows")]
    assert steps[0].startswith("Best: update the NVIDIA driver") and doctor.DRIVER_PAGE in steps[0]
    # no cu126 (no Blackwell kernels): the last torch with a CUDA 12.8 build, which this driver runs, pinned
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu128"]
    assert "torch==2.11.0 torchvision==0.26.0" in commands(advice)[1]


def test_rtx_5070_on_a_580_driver_gets_cu130():
    advice = doctor.advise(CPU_ONLY_PYPI, RTX_5070_580, "Linux", "x86_64")
    assert advice.case == doctor.CASE_CPU_BUILD and index_urls(advice) == ["https://download.pytorch.org/whl/cu130"]
    assert doctor.advise(cuda_build((13, 0), ((12, 0),), CU130_ARCHS), RTX_5070_580).case == doctor.CASE_WORKS


def test_rtx_3060_on_a_12_4_driver():
    advice = doctor.advise(CPU_ONLY_PYPI, RTX_3060_124, "Windows", "AMD64")
    assert index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]
    assert doctor.advise(cuda_build((12, 6), ((8, 6),), PRE_TURING), RTX_3060_124).case == doctor.CASE_WORKS


def test_no_kernel_image_on_the_first_convolution():
    error = "cuda:0: CUDA error: no kernel image is available for execution on the device"
    build = cuda_build((13, 0), (), CU130_ARCHS, kernel_error=error)  # capability unknown: the probe decides
    advice = doctor.advise(build, GTX_1060_580, "Linux", "x86_64")
    assert advice.case == doctor.CASE_NO_KERNELS and index_urls(advice) == ["https://download.pytorch.org/whl/cu126"]


def test_another_kernel_failure_is_not_called_working():
    build = cuda_build((13, 0), ((8, 6),), CU130_ARCHS, kernel_error="cuda:0: CUDA error: unspecified launch failure")
    assert doctor.advise(build, LINUX, "Linux", "x86_64").case == doctor.CASE_GPU_NOT_USABLE


def test_the_probe_runs_a_convolution_on_every_cuda_device(monkeypatch):
    devices = []
    monkeypatch.setattr(doctor.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(doctor.torch.cuda, "synchronize", lambda i: devices.append(i))
    monkeypatch.setattr(doctor.torch.nn.Conv2d, "to", lambda self, device: self)
    real_rand = torch.rand
    monkeypatch.setattr(doctor.torch, "rand", lambda *shape, device: real_rand(*shape))
    assert doctor.probe_kernels() is None and devices == [0, 1]

    def no_kernel(self, x):  # torch.AcceleratorError from 2.8 on, a RuntimeError before
        raise getattr(torch, "AcceleratorError", RuntimeError)("CUDA error: no kernel image is available for execution on the device\nmore")

    monkeypatch.setattr(doctor.torch.nn.Conv2d, "forward", no_kernel)
    assert doctor.probe_kernels() == "cuda:0: CUDA error: no kernel image is available for execution on the device"


def test_run_on_a_build_without_kernels_skips_the_gpu_speed_test(monkeypatch, capsys):
    build = cuda_build((13, 0), ((6, 1),), CU130_ARCHS, kernel_error="cuda:0: CUDA error: no kernel image is available")
    monkeypatch.setattr(doctor, "torch_build", lambda: build)
    monkeypatch.setattr(doctor, "read_nvidia_smi", lambda: GTX_1060_580)
    monkeypatch.setattr(doctor, "describe_devices", lambda lang="en": "cpu, cuda:0")
    monkeypatch.setattr(doctor, "best_accelerator", lambda: torch.device("cuda", 0))
    speeds = []
    monkeypatch.setattr(doctor, "training_speed", lambda device, steps: speeds.append(str(device)) or 1000.0)
    doctor.run()
    out = capsys.readouterr().out
    assert speeds == ["cpu"] and "kernel check: failed: cuda:0: CUDA error: no kernel image" in out
    assert len(out.splitlines()) <= 24 and "https://mirror.nju.edu.cn/pytorch/whl/cu126" in out


@pytest.mark.parametrize("build, smi", [(CPU_ONLY, WINDOWS), (CPU_ONLY, OLD), (CU130_IDLE, WINDOWS),
                                        (CU126_IDLE, LINUX), (CPU_ONLY, None), (CPU_ONLY, GTX_1060_580),
                                        (CPU_ONLY, RTX_5070_128), (CPU_ONLY, MX150_470)])
def test_printed_commands_can_be_copied_as_they_are(build, smi):
    advice = doctor.advise(build, smi, "Windows", "AMD64")
    for command in commands(advice):
        words = shlex.split(command)  # quotes balanced, nothing cut off
        assert words[0] == "python" or words[0].startswith("https://"), command
        assert len(command) <= 116, command  # with its indent, fits a 120-column terminal: never wrapped
        assert "\n" not in command and not command.endswith(("\\", "^", "`")), command  # no continuation lines


# --- gathering the facts --------------------------------------------------------------------------------

def fake_nvidia_smi(monkeypatch, query, header, returncode=0):
    calls = []

    def run(args, **kwargs):
        calls.append((args, kwargs))
        out = query if any(a.startswith("--query-gpu") for a in args) else header
        return subprocess.CompletedProcess(args, returncode, stdout=out, stderr="")

    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(doctor.subprocess, "run", run)
    return calls


def test_read_nvidia_smi_runs_both_commands_with_a_timeout(monkeypatch):
    calls = fake_nvidia_smi(monkeypatch, LINUX_580_QUERY, LINUX_580_HEADER)
    assert doctor.read_nvidia_smi() == LINUX
    assert [args[1:] for args, _ in calls] == [
        ["--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"], []]
    assert all(kw.get("timeout") and kw.get("errors") == "replace" for _, kw in calls)


def test_read_nvidia_smi_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    monkeypatch.setattr(doctor.subprocess, "run", lambda *a, **k: pytest.fail("must not run anything"))
    assert doctor.read_nvidia_smi() is None


def test_nvidia_smi_exit_9_is_the_driver_not_loaded(monkeypatch):
    fake_nvidia_smi(monkeypatch, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                    "", returncode=9)
    smi = doctor.read_nvidia_smi()
    assert smi == doctor.SmiFailure(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    assert doctor.describe_smi(smi).startswith("failed (exit code 9: NVIDIA-SMI has failed")
    advice = doctor.advise(CPU_ONLY, smi, "Linux", "x86_64")
    assert advice.case == doctor.CASE_SMI_FAILED and "driver is not loaded" in advice.summary
    assert advice.steps[0].startswith("Restart the computer") and commands(advice) == [doctor.DRIVER_PAGE]


@pytest.mark.parametrize("error, said", [(subprocess.TimeoutExpired("nvidia-smi", 10), "did not answer within 10 s"),
                                         (PermissionError(13, "Permission denied"), "could not start")])
def test_nvidia_smi_that_hangs_or_cannot_start(monkeypatch, error, said):
    fake_nvidia_smi(monkeypatch, "", "")

    def fail(args, **kwargs):
        raise error

    monkeypatch.setattr(doctor.subprocess, "run", fail)
    smi = doctor.read_nvidia_smi()
    assert smi.code is None and said in smi.message
    advice = doctor.advise(CPU_ONLY, smi, "Windows", "AMD64")
    assert advice.case == doctor.CASE_SMI_FAILED and said in advice.summary and "not found" not in advice.summary


def test_old_nvidia_smi_rejecting_compute_cap_falls_back_and_says_so(monkeypatch):
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        if any("compute_cap" in a for a in args):
            return subprocess.CompletedProcess(args, 2, stdout='Field "compute_cap" is not a valid field to query.\n')
        out = LINUX_470_QUERY if any(a.startswith("--query-gpu") for a in args) else LINUX_470_HEADER
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(doctor.subprocess, "run", run)
    smi = doctor.read_nvidia_smi()
    assert smi == OLD and smi.caps == () and len(calls) == 3
    assert "does not report compute capabilities" in doctor.describe_smi(smi)


def test_undecodable_bytes_and_escapes_in_a_gpu_name_never_reach_the_terminal(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"  # a real process printing Latin-1 bytes and an ANSI escape
    fake.write_bytes(b"#!/bin/sh\nif [ -n \"$1\" ]; then "
                     b"printf 'GeForce \\351\\033[2J\\033]0;x\\007, 580.82.07, 6.1\\n'; "
                     b"else printf 'CUDA Version: 13.0\\n'; fi\n")
    fake.chmod(0o755)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: str(fake))
    smi = doctor.read_nvidia_smi()
    assert smi.caps == ((6, 1),) and smi.cuda == (13, 0)
    assert smi.gpus == ("GeForce \ufffd?[2J?]0;x?",)
    assert all(c.isprintable() for c in doctor.describe_smi(smi))


def test_a_huge_number_of_gpus_is_summarised():
    query = "NVIDIA H200, 580.82.07, 9.0\n" * 200_000
    smi = doctor.parse_nvidia_smi(query, LINUX_580_HEADER)
    line = doctor.describe_smi(smi)
    assert len(smi.gpus) == 200_000 and line.count("NVIDIA H200") == 3 and "and 199,997 more" in line
    assert len(line) < 250


def test_torch_build_reads_the_installed_torch(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    build = doctor.torch_build()
    assert build.version == torch.__version__ and build.cuda is None and not build.cuda_available
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    assert doctor.torch_build().cuda == (12, 6)
    assert doctor.describe_build(doctor.torch_build()) == "CUDA 12.6 build"


def test_training_speed_is_images_over_the_median_time(monkeypatch):
    timed = []

    def fake_measure(fn, device, repeat, warmup):
        fn()  # the real steps run once
        timed.append((str(device), repeat, warmup))
        return Timing([0.5, 0.25, 1.0])  # median 0.5 s

    monkeypatch.setattr(doctor, "measure", fake_measure)
    assert doctor.training_speed("cpu", batch_size=8, steps=2, repeat=3) == 8 * 2 / 0.5
    assert timed == [("cpu", 3, 0)]


def test_training_speed_warms_up_before_the_clock_starts(monkeypatch):
    forwards, at_first_timing = [], []
    forward, measure = doctor.Tudui.forward, doctor.measure
    monkeypatch.setattr(doctor.Tudui, "forward", lambda self, x: forwards.append(1) or forward(self, x))

    def spy(fn, device, repeat, warmup):
        at_first_timing.append(len(forwards))
        return measure(fn, device, repeat=repeat, warmup=warmup)

    monkeypatch.setattr(doctor, "measure", spy)
    doctor.training_speed("cpu", batch_size=4, steps=2, repeat=3)
    assert at_first_timing == [doctor.WARMUP_STEPS]
    assert len(forwards) == doctor.WARMUP_STEPS + 3 * 2


def test_run_prints_one_screen_with_the_advice(monkeypatch, capsys):
    windows_laptop(monkeypatch)
    doctor.run()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 24, out
    assert lines[0].startswith("torch 2.14.1: CPU-only build")
    assert "RTX 3060 Laptop GPU; driver 566.36, supports CUDA up to 12.7" in lines[1]
    assert "cpu 1,000 images/s" in out
    assert "    python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126" in lines


@pytest.mark.parametrize("lang, speed_up, works", [
    ("en", "cuda:0 20,000 images/s: 20.0x the CPU", "CUDA works"),
    ("zh", "cuda:0 20,000 张/秒：是 CPU 的 20.0 倍", "核函数检查：每块显卡上都跑通了一次卷积"),
])
def test_run_shows_the_measured_speed_up(monkeypatch, capsys, lang, speed_up, works):
    monkeypatch.setattr(doctor, "torch_build", lambda: CU126_WORKING)
    monkeypatch.setattr(doctor, "read_nvidia_smi", lambda: WINDOWS)
    monkeypatch.setattr(doctor, "describe_devices", lambda lang="en": "cpu, cuda:0")
    monkeypatch.setattr(doctor, "best_accelerator", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(doctor, "training_speed", lambda device, steps: 20000.0 if str(device) == "cuda:0" else 1000.0)
    doctor.run(lang=lang)
    out = capsys.readouterr().out
    assert speed_up in out and works in out


@pytest.mark.gpu
def test_on_a_working_gpu_the_doctor_says_so():
    assert doctor.advise(doctor.torch_build(), doctor.read_nvidia_smi()).case == doctor.CASE_WORKS


# --- in Chinese: the same advice, the same commands ----------------------------------------------------

ADVICE_CASES = [  # (build, smi, system, machine, visible): every situation the tests above build
    (CPU_ONLY_PYPI, WINDOWS, "Windows", "AMD64", None), (CPU_ONLY, LINUX, "Linux", "x86_64", None),
    (CPU_ONLY, CUDA_12_4, "Windows", "AMD64", None), (CPU_ONLY, OLD, "Linux", "x86_64", None),
    (CPU_ONLY, GTX_780_440, "Linux", "x86_64", None),
    (ROCM_IDLE, LINUX, "Linux", "x86_64", None), (CU130_IDLE, WINDOWS, "Windows", "AMD64", None),
    (CU126_IDLE, WINDOWS, "Windows", "AMD64", None), (CU126_IDLE, LINUX, "Linux", "x86_64", ""),
    (CU126_WORKING, WINDOWS, "Windows", "AMD64", None),
    (MAC_MPS, None, "Darwin", "arm64", None),
    (CPU_ONLY, None, "Windows", "AMD64", None), (CU130_IDLE, None, "Windows", "AMD64", None),
    (CPU_ONLY_PYPI, None, "Darwin", "arm64", None),
    (CPU_ONLY, GTX_1060_580, "Linux", "x86_64", None),
    (cuda_build((13, 0), ((6, 1),), CU130_ARCHS), GTX_1060_580, "Linux", "x86_64", None),
    (CU130_IDLE, GTX_1050_TI_566, "Windows", "AMD64", None),
    (CPU_ONLY_PYPI, MX150_470, "Windows", "AMD64", None), (CPU_ONLY_PYPI, RTX_5070_128, "Windows", "AMD64", None),
    (cuda_build((12, 6), ((12, 0),), PRE_TURING), RTX_5070_128, "Windows", "AMD64", None),
    (CPU_ONLY_PYPI, RTX_5070_580, "Linux", "x86_64", None), (CPU_ONLY_PYPI, RTX_3060_124, "Windows", "AMD64", None),
    (cuda_build((13, 0), (), CU130_ARCHS, kernel_error="cuda:0: CUDA error: no kernel image is available"),
     GTX_1060_580, "Linux", "x86_64", None),
    (cuda_build((13, 0), ((8, 6),), CU130_ARCHS, kernel_error="cuda:0: CUDA error: unspecified launch failure"),
     LINUX, "Linux", "x86_64", None),
    (CPU_ONLY, doctor.SmiFailure(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
     "Linux", "x86_64", None),
    (CPU_ONLY, doctor.SmiFailure(2, "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error"),
     "Linux", "x86_64", None),
    (CPU_ONLY, doctor.SmiFailure(None, "did not answer within 10 s (the driver is not responding)"),
     "Windows", "AMD64", None),
]
CHINESE = re.compile("[\u4e00-\u9fff]")


def test_no_template_is_left_in_english():  # test_text checks that each has its twin with the same fields
    table = json.loads((resources.files("tudui") / "text" / "doctor.json").read_text(encoding="utf-8"))
    assert [key for key, text in table["zh"].items() if text == table["en"][key]] == []


@pytest.mark.parametrize("build, smi, system, machine, visible", ADVICE_CASES)
def test_chinese_advice_has_the_same_commands_and_is_chinese_around_them(build, smi, system, machine, visible):
    en = doctor.advise(build, smi, system, machine, visible)
    zh = doctor.advise(build, smi, system, machine, visible, lang="zh")
    assert zh.case == en.case and len(zh.steps) == len(en.steps)
    for english, chinese in zip(en.steps, zh.steps):  # a command stands where it stands in the English
        assert (chinese if chinese.startswith("    ") else None) == (english if english.startswith("    ") else None)
    for line in (zh.summary, *(s for s in zh.steps if not s.startswith("    "))):
        assert CHINESE.search(line), line


def windows_laptop(monkeypatch):
    """The run of test_run_prints_one_screen_with_the_advice: a CPU-only torch on a laptop with an RTX 3060."""
    monkeypatch.setattr(doctor, "torch_build", lambda: CPU_ONLY_PYPI)
    monkeypatch.setattr(doctor, "best_accelerator", lambda: None)
    monkeypatch.setattr(doctor.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(doctor.platform, "system", lambda: "Windows")
    fake_nvidia_smi(monkeypatch, WINDOWS_566_QUERY, WINDOWS_566_HEADER)
    monkeypatch.setattr(doctor, "training_speed", lambda device, steps: 1000.0)


def assert_chinese_report(out):
    lines = out.splitlines()
    assert lines[0].startswith("torch 2.14.1：CPU 版本的 torch；Python ") and lines[1].startswith("nvidia-smi：NVIDIA GeForce")
    assert lines[2].startswith("torch 能用的设备：cpu（") and "训练速度（Tudui，批量大小 64）：cpu 1,000 张/秒" in out
    assert "    python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126" in lines
    assert all(CHINESE.search(line) for line in lines if line and not line.startswith("    ")), out


def test_run_in_chinese_prints_its_labels_in_chinese(monkeypatch, capsys):
    windows_laptop(monkeypatch)
    doctor.run(lang="zh")
    assert_chinese_report(capsys.readouterr().out)


def test_python_m_tudui_doctor_lang_zh(monkeypatch, capsys):
    windows_laptop(monkeypatch)
    assert main(["doctor", "--lang", "zh"]) == 0
    assert_chinese_report(capsys.readouterr().out)
    assert main(["doctor"]) == 0 and capsys.readouterr().out.startswith("torch 2.14.1: CPU-only build")


def test_a_bad_lang_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "torch_build", lambda: pytest.fail("must not start the diagnosis"))
    line = fails_in_one_line(capsys, ["doctor", "--lang", "fr"])
    assert "--lang" in line and "'fr'" in line and "zh" in line
    for call in (lambda: doctor.run(lang="fr"), lambda: doctor.advise(CPU_ONLY, None, lang="zh-CN")):
        with pytest.raises(ValueError, match=r"^language must be one of en, zh, not '(fr|zh-CN)'$"):
            call()


@pytest.mark.parametrize("lang, says", [("en", "nvidia-smi: failed (reported 99999999999999999..., a compute capability "
                                               "or CUDA version no GPU or driver has)"),
                                        ("zh", "报告了 99999999999999999...，没有哪块显卡或哪个驱动有这样的计算能力")])
@pytest.mark.parametrize("query, header", [("GeForce GTX 1060, 580.82.07, " + "9" * 5000 + ".1\n", "CUDA Version: 13.0"),
                                           ("GeForce GTX 1060, 580.82.07, 6.1\n", "CUDA Version: " + "9" * 5000 + ".0")])
def test_an_absurd_number_from_nvidia_smi_is_one_line_not_an_internal_error(monkeypatch, capsys, lang, says, query,
                                                                           header):
    fake_nvidia_smi(monkeypatch, query, header)
    monkeypatch.setattr(doctor, "training_speed", lambda device, steps=10: 1000.0)
    assert main(["doctor", "--lang", lang]) == 0
    out, err = capsys.readouterr()
    assert err == "" and len([line for line in out.splitlines() if "9999" in line]) == 2  # the report and the advice
    assert says in out and all(len(line) < 200 for line in out.splitlines())
