"""pick_device: the best device on 'auto', and a clear DeviceError (never a silent CPU) otherwise.

GPUs and Macs are simulated by monkeypatching what torch reports; constructing a
``torch.device("cuda", 0)`` needs no GPU.
"""
import types

import pytest
import torch

from tudui import DeviceError, best_accelerator, describe_devices, pick_device, synchronize
from tudui.device import CHOICES


@pytest.fixture
def machine(monkeypatch):
    """Pretend to be a machine with the given accelerators (and no CUDA_VISIBLE_DEVICES)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def make(cuda=0, mps=False, cuda_build="12.4"):
        monkeypatch.setattr(torch.version, "cuda", cuda_build)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(torch.backends.mps, "is_built", lambda: mps)
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
        kind = "cuda" if cuda else "mps" if mps else None
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: kind is not None)
        monkeypatch.setattr(torch.accelerator, "current_accelerator",
                            lambda *a, **k: torch.device(kind) if kind else None)
    return make


# --- what this machine really has ---------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_auto_is_cpu_on_this_machine():
    assert pick_device("auto") == torch.device("cpu")
    assert pick_device() == torch.device("cpu")
    assert best_accelerator() is None


@pytest.mark.parametrize("want", ["cpu", "CPU", " cpu ", "cpu:0", torch.device("cpu")])
def test_cpu_is_always_there(want):
    dev = pick_device(want)
    assert isinstance(dev, torch.device)
    assert dev == torch.device("cpu")


@pytest.mark.parametrize("want", ["gpu", "meta", "cuda:x", "cpu:1", "", "cuda:", "cuda:-1", "tpu", "mps:1", 42, None,
                                  1.5, torch.device("cpu", 1), torch.device("meta"), "cuda:99999999999999999999",
                                  "cuda:1024", "cuda:" + "9" * 5000])
def test_malformed_names_list_the_choices(want):
    with pytest.raises(DeviceError) as err:
        pick_device(want)
    assert CHOICES in str(err.value)
    for choice in ("auto", "cpu", "cuda", "cuda:N", "mps"):
        assert choice in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_here_raises_with_a_reason():
    with pytest.raises(DeviceError, match="cannot use cuda") as err:
        pick_device("cuda")
    reasons = ("built without CUDA", "no CUDA device is visible", "no NVIDIA driver or no GPU")  # each one: below
    assert sum(reason in str(err.value) for reason in reasons) == 1, str(err.value)


@pytest.mark.parametrize("mps, picked", [(False, "cpu"), (True, "mps")])
def test_describe_devices_reports_torch_mps_and_the_pick(machine, mps, picked):
    machine(cuda=0, mps=mps, cuda_build=None)
    text = describe_devices()
    assert text.startswith(f"torch {torch.__version__} (CUDA build: no)")
    assert ("MPS (Apple GPU): not available" in text) != mps
    assert text.splitlines()[-1] == f"pick_device('auto') -> {picked}"


def test_synchronize_waits_through_torch_accelerator(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.accelerator, "synchronize", calls.append)
    synchronize("cpu")
    assert calls == []  # nothing queued on a CPU
    synchronize("cuda:1")
    synchronize(torch.device("mps"))
    assert calls == [torch.device("cuda", 1), torch.device("mps")]


# --- simulated machines -------------------------------------------------------------------------

def test_auto_picks_cuda_when_available(machine):
    machine(cuda=1, mps=False)
    assert pick_device("auto") == torch.device("cuda", 0)
    assert best_accelerator() == torch.device("cuda", 0)


def test_auto_picks_mps_when_only_mps_is_there(machine):
    machine(cuda=0, mps=True, cuda_build=None)
    assert pick_device("auto") == torch.device("mps")


def test_auto_is_cpu_without_accelerators(machine):
    machine(cuda=0, mps=False)
    assert pick_device("auto") == torch.device("cpu")


def test_cuda_when_available(machine):
    machine(cuda=2)
    assert pick_device("cuda") == torch.device("cuda", 0)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert pick_device(torch.device("cuda", 1)) == torch.device("cuda", 1)


def test_cuda_index_out_of_range_names_the_count(machine):
    machine(cuda=2)
    with pytest.raises(DeviceError) as err:
        pick_device("cuda:3")
    msg = str(err.value)
    assert "cuda:3" in msg and "2 CUDA device" in msg
    assert "CUDA_VISIBLE_DEVICES" not in msg  # not set, so not blamed
    with pytest.raises(DeviceError, match="2 CUDA device"):
        pick_device(torch.device("cuda", 2))


@pytest.mark.parametrize("index", [1, 128, 256, 1023])
def test_cuda_index_beyond_the_gpus_is_refused_never_wrapped(machine, index):
    """torch.device("cuda", 256) is cuda:0 after an 8-bit wrap-around: the index is checked before torch sees it."""
    machine(cuda=1)
    with pytest.raises(DeviceError, match=f"cuda:{index} does not exist: 1 CUDA device"):
        pick_device(f"cuda:{index}")


def test_cuda_index_error_mentions_cuda_visible_devices_when_set(machine, monkeypatch):
    machine(cuda=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(DeviceError) as err:
        pick_device("cuda:3")
    assert "2 CUDA device" in str(err.value)
    assert "CUDA_VISIBLE_DEVICES='4,5'" in str(err.value)


@pytest.mark.parametrize("want", ["cuda", "cuda:0"])
def test_torch_without_cuda_says_so(machine, want):
    machine(cuda=0, cuda_build=None)
    with pytest.raises(DeviceError, match="built without CUDA"):
        pick_device(want)


def test_no_driver_says_so(machine):
    machine(cuda=0, cuda_build="12.4")
    with pytest.raises(DeviceError) as err:
        pick_device("cuda")
    assert "driver" in str(err.value) and "nvidia-smi" in str(err.value)


def test_hidden_gpus_blame_cuda_visible_devices(machine, monkeypatch):
    machine(cuda=0, cuda_build="12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceError, match="CUDA_VISIBLE_DEVICES"):
        pick_device("cuda")


def test_mps_unavailable_raises(machine):
    machine(cuda=0, mps=False)
    with pytest.raises(DeviceError, match="cannot use mps.*built without MPS"):
        pick_device("mps")


def test_mps_built_but_unsupported_machine(machine, monkeypatch):
    machine(cuda=0, mps=False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    with pytest.raises(DeviceError, match="does not support it"):
        pick_device("mps")


def test_mps_when_available(machine):
    machine(cuda=0, mps=True, cuda_build=None)
    assert pick_device("mps") == torch.device("mps")


def test_xpu_unavailable_raises(machine):
    machine(cuda=0)
    with pytest.raises(DeviceError, match="xpu"):
        pick_device("xpu")


@pytest.mark.parametrize("want", ["cuda", "cuda:0", "cuda:1", "mps", "xpu"])
@pytest.mark.parametrize("kind", ["no-cuda-build", "no-driver", "one-gpu"])
def test_specific_request_never_falls_back_to_cpu(machine, want, kind):
    """Only cuda and cuda:0 on the one-GPU machine are granted; every other request is refused, never the CPU."""
    machine(cuda=1 if kind == "one-gpu" else 0, cuda_build=None if kind == "no-cuda-build" else "12.4")
    if kind == "one-gpu" and want in ("cuda", "cuda:0"):
        assert pick_device(want) == torch.device("cuda", 0)
    else:
        with pytest.raises(DeviceError, match=want.split(":")[0]):
            pick_device(want)


def test_describe_devices_lists_simulated_gpus(machine, monkeypatch):
    machine(cuda=2)
    props = types.SimpleNamespace(name="Fake GPU", total_memory=16 * 2**30, major=8, minor=6)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    text = describe_devices()
    assert "cuda:0: Fake GPU, 16.0 GiB, compute capability 8.6" in text
    assert "cuda:1: Fake GPU" in text
    assert "pick_device('auto') -> cuda:0" in text


def test_describe_devices_without_cuda_build_says_why(machine):
    machine(cuda=0, cuda_build=None)
    text = describe_devices()
    assert "CUDA build: no" in text
    assert "built without CUDA" in text


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_real_gpu_is_picked_and_indexed():
    assert pick_device("auto").type == "cuda"
    dev = pick_device("cuda")
    assert dev == torch.device("cuda", 0)
    torch.ones(2, device=dev).sum().item()  # usable
    synchronize(dev)
    count = torch.cuda.device_count()
    with pytest.raises(DeviceError, match=f"{count} CUDA device"):
        pick_device(f"cuda:{count}")
    assert "cuda:0:" in describe_devices()


@pytest.mark.parametrize("visible, cuda_build, mentioned", [
    (None, None, False), ("", None, False),        # a notebook on a CPU-only machine: nothing to say
    ("", "12.4", True), ("0,1", None, True), ("0", "12.4", True),
])
def test_describe_devices_names_cuda_visible_devices_only_when_it_matters(machine, monkeypatch, visible,
                                                                         cuda_build, mentioned):
    machine(cuda=0, cuda_build=cuda_build)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert ("CUDA_VISIBLE_DEVICES" in describe_devices()) == mentioned


def test_describe_devices_shows_cudnn_as_a_dotted_version(monkeypatch):
    """torch reports cuDNN 9.1.0 as the number 90100: learners read the dotted form."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    assert "cuDNN: 9.1.0" in describe_devices().splitlines()
