"""quick_mode(): quick unless a GPU and real CIFAR-10 on disk make the full lessons worth it; host()."""
import os
import sys

import pytest
import torch

from tudui import data as settings  # quick_mode() and host() are in tudui.data
from tudui import host, quick_mode


@pytest.fixture
def machine(monkeypatch):
    """``machine(accelerator=..., on_disk=..., data=...)``: pretend a GPU or none, CIFAR-10 on disk or
    not, and a $TUDUI_DATA; $TUDUI_QUICK is unset. Returns the roots that the file check was asked about."""
    asked = []

    def pretend(accelerator=True, on_disk=True, data="auto"):
        monkeypatch.delenv("TUDUI_QUICK", raising=False)
        monkeypatch.setenv("TUDUI_DATA", data)
        found = torch.device("cuda", 0) if accelerator else None
        monkeypatch.setattr(settings, "best_accelerator", lambda: found)
        monkeypatch.setattr(settings, "cifar10_on_disk", lambda root: asked.append(root) or on_disk)
        monkeypatch.setattr(settings, "host", lambda: None)  # not a cloud notebook
        return asked
    return pretend


def test_full_size_only_with_an_accelerator_and_cifar10_on_disk(machine):
    asked = machine(accelerator=True, on_disk=True)
    assert quick_mode() is False
    assert asked == ["data"]
    assert quick_mode(root="elsewhere") is False and asked[-1] == "elsewhere"


def test_an_offline_gpu_machine_stays_quick(machine):
    """No CIFAR-10 on disk: a full run would train on 50,000 synthetic images for nothing."""
    machine(accelerator=True, on_disk=False)
    assert quick_mode() is True


def test_a_cloud_gpu_runs_full_size_before_cifar10_is_downloaded(machine, monkeypatch):
    """A fresh Colab or Kaggle session has no data yet, but downloads it: the lesson's full run."""
    machine(accelerator=True, on_disk=False)
    monkeypatch.setattr(settings, "host", lambda: "kaggle")
    assert quick_mode() is False
    monkeypatch.setattr(settings, "best_accelerator", lambda: None)
    assert quick_mode() is True  # a CPU runtime stays quick


def test_a_cpu_stays_quick_even_with_cifar10(machine):
    machine(accelerator=False, on_disk=True)
    assert quick_mode() is True


@pytest.mark.parametrize("data, quick", [("synthetic", True), ("cifar10", False), ("auto", False)])
def test_tudui_data_synthetic_is_quick(machine, data, quick):
    machine(accelerator=True, on_disk=True, data=data)
    assert quick_mode() is quick


@pytest.mark.parametrize("value, quick", [("1", True), ("true", True), (" Yes ", True),
                                          ("0", False), ("FALSE", False), ("no", False)])
def test_tudui_quick_decides_when_set(machine, monkeypatch, value, quick):
    asked = machine(accelerator=quick, on_disk=quick)  # the opposite of what the machine would choose
    monkeypatch.setenv("TUDUI_QUICK", value)
    assert quick_mode() is quick
    assert asked == []  # no look at the disk


@pytest.mark.parametrize("value", ["2", "maybe", "quick"])
def test_an_invalid_tudui_quick_is_a_clear_error(machine, monkeypatch, value):
    machine()
    monkeypatch.setenv("TUDUI_QUICK", value)
    with pytest.raises(ValueError, match=rf"TUDUI_QUICK='{value}' is not understood; set it to 1 \(quick\) or 0"):
        quick_mode()


def test_the_file_check_is_real(monkeypatch, tmp_path):
    """Unmocked: an empty folder holds no CIFAR-10, so even with an accelerator the lessons stay quick."""
    monkeypatch.delenv("TUDUI_QUICK", raising=False)
    monkeypatch.setenv("TUDUI_DATA", "auto")
    monkeypatch.setattr(settings, "best_accelerator", lambda: torch.device("cuda", 0))
    assert quick_mode(root=str(tmp_path)) is True


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No Colab module, no Kaggle variable, no host folders: what a laptop looks like."""
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.setattr(settings, "KAGGLE_WORKING", tmp_path / "kaggle" / "working")
    monkeypatch.setattr(settings, "MODELSCOPE_WORKSPACE", tmp_path / "mnt" / "workspace")
    monkeypatch.delenv("AutoDLContainerUUID", raising=False)
    monkeypatch.setattr(settings, "AUTODL_DATA_DISK", str(tmp_path / "root" / "autodl-tmp"))
    return tmp_path


def test_no_host_on_an_ordinary_machine(nowhere):
    assert host() is None


def test_colab_is_its_module(nowhere, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert host() == "colab"


def test_kaggle_needs_its_variable_and_its_output_folder(nowhere, monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert host() is None  # a laptop with the variable exported is not Kaggle
    settings.KAGGLE_WORKING.mkdir(parents=True)
    assert host() == "kaggle"


def test_modelscope_is_its_workspace_folder(nowhere):
    settings.MODELSCOPE_WORKSPACE.mkdir(parents=True)
    assert host() == "modelscope"


def test_autodl_is_its_container_variable(nowhere, monkeypatch):
    monkeypatch.setenv("AutoDLContainerUUID", "a1b2c3d4")
    assert host() == "autodl"


def test_autodl_is_its_data_disk(nowhere):
    (nowhere / "root" / "autodl-tmp").mkdir(parents=True)
    assert host() == "autodl"


def test_a_closed_root_folder_is_no_autodl_and_no_error(nowhere, monkeypatch):
    """As an ordinary user /root cannot be looked into: that is not AutoDL, and not an error either."""
    monkeypatch.setattr(settings, "AUTODL_DATA_DISK", "/root/autodl-tmp")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).startswith("/root/"):
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    assert host() is None


def test_a_paid_autodl_gpu_runs_full_size(machine, monkeypatch, nowhere):
    machine(accelerator=True, on_disk=False)
    monkeypatch.setattr(settings, "host", host)  # the real one: machine() pretends there is no host
    monkeypatch.setenv("AutoDLContainerUUID", "a1b2c3d4")
    assert quick_mode() is False
