"""Fixtures shared by the unit tests: synthetic data, no network, the course's own Tudui class."""
import contextlib
import socket
import sys
import types
from unittest import mock

import pytest
import torch
from torch import nn


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: skip them here when there is none."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not item.keywords: it holds parameter ids too
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _offline_synthetic(monkeypatch):
    """Every test: synthetic data by default, and no network beyond this machine (a download fails at once)."""
    monkeypatch.setenv("TUDUI_DATA", "synthetic")

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def local(sock, address):
        return sock.family == getattr(socket, "AF_UNIX", None) or (
            isinstance(address, tuple) and address[0] in ("127.0.0.1", "localhost", "::1"))

    def guarded(real):
        def call(sock, address, *args, **kwargs):
            if not local(sock, address):
                raise OSError(f"network access is disabled in the tests (tried {address!r})")
            return real(sock, address, *args, **kwargs)
        return call

    monkeypatch.setattr(socket.socket, "connect", guarded(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(connect_ex))


def course_tudui_class(module_name="model"):
    """A fresh copy of the course's Tudui class, written as in the course (model.py / train.py).

    Its ``__module__`` is ``module_name``, so pickling an instance records
    ``<module_name>.Tudui`` exactly as a learner's ``torch.save(tudui, ...)`` does.
    """
    from torch.nn import Conv2d, Flatten, Linear, MaxPool2d, Sequential

    class Tudui(nn.Module):
        def __init__(self):
            super(Tudui, self).__init__()
            self.model = Sequential(
                Conv2d(3, 32, 5, 1, 2),
                MaxPool2d(2),
                Conv2d(32, 32, 5, 1, 2),
                MaxPool2d(2),
                Conv2d(32, 64, 5, 1, 2),
                MaxPool2d(2),
                Flatten(),
                Linear(64 * 4 * 4, 64),
                Linear(64, 10),
            )

        def forward(self, x):
            x = self.model(x)
            return x

    Tudui.__module__ = module_name
    Tudui.__qualname__ = "Tudui"
    return Tudui


@pytest.fixture
def course_class():
    """The factory :func:`course_tudui_class` (fixtures are importable whatever pytest's import mode)."""
    return course_tudui_class


@contextlib.contextmanager
def _registered(cls, module_name):
    main = sys.modules["__main__"]
    if module_name == "__main__":
        with mock.patch.object(main, "Tudui", cls, create=True):
            yield
    else:
        module = types.ModuleType(module_name)
        module.Tudui = cls
        with mock.patch.dict(sys.modules, {module_name: module}):
            yield


@pytest.fixture
def register_class():
    """``with register_class(cls, name):`` makes ``cls`` importable as ``<name>.Tudui`` (as pickle needs
    to save it), as on the learner's machine; afterwards it is gone, as on ours."""
    return _registered


@contextlib.contextmanager
def _storages_tagged_cuda0():
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):
        yield


@pytest.fixture
def saved_as_on_gpu():
    """A context manager: inside it, torch.save tags every storage 'cuda:0', as a save during GPU training does."""
    return _storages_tagged_cuda0


def state_equal(a, b):
    """True when two state_dicts have the same keys and identical tensors (compared on the CPU)."""
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


@pytest.fixture
def same_state():
    return state_equal


def _course_setup(train_limit, test_limit, device="cpu"):
    """The course's recipe on synthetic data, seeded: batch 64, Tudui, CrossEntropyLoss, SGD(lr=1e-2).

    Returns (model, train_loader, test_loader, loss_fn, optimizer). Nothing else draws from torch's
    RNG between the seed and the model's initialisation, so results are repeatable.
    """
    import tudui

    torch.manual_seed(0)
    train_set = tudui.cifar10(True, source="synthetic", limit=train_limit)
    test_set = tudui.cifar10(False, source="synthetic", limit=test_limit)
    train_loader, test_loader = tudui.loaders(train_set, test_set, batch_size=64, device=device, num_workers=0)
    model = tudui.Tudui().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return model, train_loader, test_loader, nn.CrossEntropyLoss(), optimizer


@pytest.fixture
def course_setup():
    """``course_setup(train_limit, test_limit, device="cpu")``: see :func:`_course_setup`."""
    return _course_setup
