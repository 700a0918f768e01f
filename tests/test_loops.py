"""train_one_epoch / evaluate / fit: plain numbers out, learning happens, no host sync per batch."""
import collections

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

import tudui
from tudui import History, Tudui, cifar10, evaluate, fit, train_one_epoch

KEYS = {"loss", "accuracy", "images_per_s", "seconds"}


@pytest.fixture(scope="module")
def small_set():
    return cifar10(True, source="synthetic", limit=128)


def loader(dataset, n, batch_size=16, shuffle=False):
    return DataLoader(Subset(dataset, range(n)), batch_size=batch_size, shuffle=shuffle)


def weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_results_are_plain_python_numbers(small_set):
    torch.manual_seed(0)
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    train = train_one_epoch(model, loader(small_set, 40), nn.CrossEntropyLoss(), optimizer, "cpu", progress=False)
    test = evaluate(model, loader(small_set, 24), nn.CrossEntropyLoss(), torch.device("cpu"), progress=False)
    for result, n in ((train, 40), (test, 24)):
        assert KEYS <= set(result)
        for key in KEYS:
            assert type(result[key]) is float, (key, type(result[key]))
        assert result["images"] == n and type(result["images"]) is int
        assert 0.0 <= result["accuracy"] <= 1.0
        assert result["loss"] > 0 and result["seconds"] > 0
        assert result["images_per_s"] == pytest.approx(n / result["seconds"])


def test_train_updates_and_evaluate_does_not(small_set):
    torch.manual_seed(0)
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    start = weights(model)
    evaluate(model, loader(small_set, 32), nn.CrossEntropyLoss(), "cpu", progress=False)
    assert not model.training
    assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())
    train_one_epoch(model, loader(small_set, 32), nn.CrossEntropyLoss(), optimizer, "cpu", progress=False)
    assert model.training
    assert all(not torch.equal(start[k], v) for k, v in model.state_dict().items())


def test_evaluate_computes_the_mean_loss_and_accuracy(small_set):
    torch.manual_seed(1)
    model = Tudui()
    batches = loader(small_set, 50, batch_size=16)  # the last batch is short: means weigh by images
    result = evaluate(model, batches, nn.CrossEntropyLoss(), "cpu", progress=False)
    imgs = torch.stack([small_set[i][0] for i in range(50)])
    targets = torch.tensor(small_set.targets[:50])
    with torch.no_grad():
        outputs = model(imgs)
    assert result["loss"] == pytest.approx(nn.functional.cross_entropy(outputs, targets).item(), rel=1e-5)
    assert result["accuracy"] == pytest.approx((outputs.argmax(1) == targets).float().mean().item())


def test_fit_lowers_the_loss_and_records_history(small_set):
    torch.manual_seed(0)
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    train_loader = loader(small_set, 64, shuffle=True)
    check = loader(small_set, 64, batch_size=64)
    loss_fn = nn.CrossEntropyLoss()
    before = evaluate(model, check, loss_fn, "cpu", progress=False)["loss"]
    lines, calls = [], []
    history = fit(model, train_loader, loader(small_set, 16), loss_fn, optimizer, "cpu", epochs=3,
                  on_epoch_end=lambda epoch, h: calls.append((epoch, h, len(h.epochs))),
                  progress=False, log=lines.append)
    after = evaluate(model, check, loss_fn, "cpu", progress=False)["loss"]
    assert after < before - 0.02  # about 0.05 lower after these 12 small steps
    assert isinstance(history, History) and history.label == "cpu"
    assert history.epochs == [1, 2, 3]
    for series in (history.train_loss, history.train_accuracy, history.test_loss, history.test_accuracy,
                   history.seconds, history.images_per_s):
        assert len(series) == 3 and all(type(x) is float for x in series)
    assert history.train_loss[-1] < history.train_loss[0]
    assert [(e, n) for e, _, n in calls] == [(1, 1), (2, 2), (3, 3)]
    assert all(h is history for _, h, _ in calls)
    assert len(lines) == 3 and lines[0].startswith("epoch 1: train loss ")
    assert f"{history.test_accuracy[-1]:.1%}" in lines[-1]


def test_fit_continues_from_start_epoch(small_set):
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    tiny = loader(small_set, 8, batch_size=8)
    history = fit(model, tiny, tiny, nn.CrossEntropyLoss(), optimizer, "cpu", epochs=4, start_epoch=2,
                  progress=False, log=None, label="resumed")
    assert history.epochs == [3, 4] and history.label == "resumed"
    nothing = fit(model, tiny, tiny, nn.CrossEntropyLoss(), optimizer, "cpu", epochs=2, start_epoch=2,
                  progress=False, log=None)
    assert nothing.epochs == []


def test_fit_sets_the_epoch_of_shuffling_samplers(small_set):
    class Recording(torch.utils.data.SequentialSampler):
        def __init__(self, data):
            super().__init__(data)
            self.epochs = []

        def set_epoch(self, epoch):
            self.epochs.append(epoch)

    data = Subset(small_set, range(8))
    sampler = Recording(data)
    train_loader = DataLoader(data, batch_size=8, sampler=sampler)
    fit(Tudui(), train_loader, train_loader, nn.CrossEntropyLoss(), torch.optim.SGD(Tudui().parameters(), lr=0.0),
        "cpu", epochs=3, start_epoch=1, progress=False, log=None)
    assert sampler.epochs == [2, 3]


@pytest.fixture
def host_syncs(monkeypatch):
    """Count Python-level calls that copy a tensor's value to the host (each a sync on a GPU)."""
    calls = collections.Counter()
    for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


def test_no_host_sync_per_batch(small_set, host_syncs):
    loss_fn = nn.CrossEntropyLoss()
    counts = {}
    for batches in (2, 6):
        model = Tudui()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        host_syncs.clear()
        train_one_epoch(model, loader(small_set, 4 * batches, batch_size=4, shuffle=True), loss_fn, optimizer,
                        "cpu", progress=False)
        evaluate(model, loader(small_set, 4 * batches, batch_size=4), loss_fn, "cpu", progress=False)
        counts[batches] = sum(host_syncs.values())
    assert counts[2] == counts[6], counts
    assert counts[2] <= 12  # a handful per epoch (DataLoader seeding, the final totals), however many batches

    # The counter is real: the naive loop (``.item()`` every batch) is caught.
    host_syncs.clear()
    for imgs, targets in loader(small_set, 24, batch_size=4):
        _ = loss_fn(model(imgs), targets).item()
    assert host_syncs["item"] >= 6


@pytest.mark.gpu
def test_train_on_gpu_with_pinned_batches(course_setup):
    model, train_loader, test_loader, loss_fn, optimizer = course_setup(256, 64, device="cuda")
    assert train_loader.pin_memory
    history = fit(model, train_loader, test_loader, loss_fn, optimizer, "cuda", epochs=2,
                  progress=False, log=None)
    assert history.label == "cuda"
    assert all(type(x) is float for x in history.train_loss + history.test_accuracy)
    assert history.train_loss[-1] < history.train_loss[0]
    assert next(model.parameters()).device.type == "cuda"
    assert tudui.loops._non_blocking(train_loader, "cuda")
