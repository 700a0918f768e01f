"""Helpers the tests share: plain functions and context managers, imported as ``from helpers import ...``
(pytest puts this folder on the path)."""
import contextlib
import sys
import types
from unittest import mock

import torch
from torch import nn


def fails_in_one_line(capsys, argv, code=2):
    """Run the CLI; it must exit with ``code``, print nothing on stdout and exactly one line, no traceback,
    on stderr. Returns that line."""
    from tudui.cli import main

    assert main(list(argv)) == code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and len(lines[0]) < 500
    assert lines[0].startswith(("tudui: error: ", "tudui: 错误：") if code == 2 else "tudui: ")
    assert out == "" or code != 2, out  # a refused command prints nothing else
    return lines[0]


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


@contextlib.contextmanager
def registered(cls, module_name):
    """``with registered(cls, name):`` makes ``cls`` importable as ``<name>.Tudui`` (as pickle needs to save
    it), as on the learner's machine; afterwards it is gone, as on ours."""
    main = sys.modules["__main__"]
    if module_name == "__main__":
        with mock.patch.object(main, "Tudui", cls, create=True):
            yield
    else:
        module = types.ModuleType(module_name)
        module.Tudui = cls
        with mock.patch.dict(sys.modules, {module_name: module}):
            yield


@contextlib.contextmanager
def saved_as_on_gpu():
    """Inside it, torch.save tags every storage 'cuda:0', as a save during GPU training does."""
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):
        yield


def state_equal(a, b):
    """True when two state_dicts have the same keys and identical tensors (compared on the CPU)."""
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def course_setup(train_limit, test_limit, device="cpu"):
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

