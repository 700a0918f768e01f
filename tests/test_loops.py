"""train_one_epoch / evaluate / fit: plain numbers out, learning happens, no host sync per batch."""
import collections
import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

import tudui
from tudui import History, Tudui, cifar10, evaluate, fit, train_one_epoch
from helpers import course_setup

KEYS = {"loss", "accuracy", "images_per_s", "seconds"}
loops = tudui.loops


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


def test_any_iterable_of_batches_will_do(small_set):
    """The loop needs no DataLoader: a list of (images, targets) pairs is a loader too."""
    torch.manual_seed(0)
    batches = list(loader(small_set, 20, batch_size=8))
    model = Tudui()
    from_list = evaluate(model, batches, nn.CrossEntropyLoss(), "cpu", progress=False)
    from_loader = evaluate(model, loader(small_set, 20, 8), nn.CrossEntropyLoss(), "cpu", progress=False)
    assert from_list["images"] == from_loader["images"] == 20
    assert from_list["loss"] == from_loader["loss"] and from_list["accuracy"] == from_loader["accuracy"]


@pytest.mark.parametrize("empty", ["dataset", "drop_last"])
def test_an_empty_loader_is_an_error_not_a_zero_loss(small_set, empty):
    data = Subset(small_set, range(0 if empty == "dataset" else 5))
    nothing = DataLoader(data, batch_size=8, drop_last=True)
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="has no batches"):
        fit(model, nothing, loader(small_set, 8), nn.CrossEntropyLoss(), optimizer, "cpu", epochs=1,
            progress=False, log=None)
    with pytest.raises(ValueError, match="has no batches"):
        evaluate(model, nothing, nn.CrossEntropyLoss(), "cpu", progress=False)


def test_totals_are_summed_across_ranks_once_per_epoch(small_set, monkeypatch):
    """Under torchrun the epoch's sums go through one all_reduce; here a fake one doubles them
    (as two ranks with the same batches would): the means stay, the image count doubles."""
    calls = []

    def two_identical_ranks(totals):
        calls.append(totals.clone())
        return totals.mul_(2)

    model = Tudui()
    alone = evaluate(model, loader(small_set, 24, batch_size=8), nn.CrossEntropyLoss(), "cpu", progress=False)
    monkeypatch.setattr(loops, "sum_across_ranks", two_identical_ranks)
    both = evaluate(model, loader(small_set, 24, batch_size=8), nn.CrossEntropyLoss(), "cpu", progress=False)
    assert len(calls) == 1 and calls[0].tolist()[2] == 24  # loss sum, correct, images: one call per epoch
    assert both["images"] == 48
    assert both["loss"] == pytest.approx(alone["loss"]) and both["accuracy"] == pytest.approx(alone["accuracy"])


@pytest.mark.parametrize("kind, workers", [("dataloader", 0), ("dataloader", 2), ("resident", None)])
def test_resume_is_bit_identical_to_an_uninterrupted_run(small_set, kind, workers):
    """3 epochs straight == 1 epoch, a checkpoint, then a fresh start (new model, optimizer, loaders,
    and the global RNG anywhere) resumed to 3: with DataLoader workers on and off, and resident data."""
    train_set, test_set = Subset(small_set, range(64)), Subset(small_set, range(64, 96))
    if kind == "resident":
        train_set = cifar10(True, source="synthetic", limit=64)
        test_set = cifar10(False, source="synthetic", limit=32)

    def fresh_start():
        model = Tudui()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        make = tudui.resident_loaders if kind == "resident" else tudui.loaders
        extra = {} if kind == "resident" else {"num_workers": workers}
        return model, optimizer, make(train_set, test_set, batch_size=16, seed=3, **extra)

    def train(model, optimizer, loaders, epochs, start_epoch=0):
        fit(model, *loaders, nn.CrossEntropyLoss(), optimizer, "cpu", epochs, start_epoch=start_epoch,
            progress=False, log=None)

    torch.manual_seed(0)
    straight, optimizer, loaders = fresh_start()
    train(straight, optimizer, loaders, epochs=3)

    torch.manual_seed(0)
    model, optimizer, loaders = fresh_start()
    train(model, optimizer, loaders, epochs=1)
    saved = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    del model, optimizer, loaders

    torch.manual_seed(12345)  # a new process: the global RNG is wherever it is
    resumed, optimizer, loaders = fresh_start()
    resumed.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    train(resumed, optimizer, loaders, epochs=3, start_epoch=1)
    for (name, a), b in zip(straight.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(straight.model[0].weight, Tudui().model[0].weight)  # it did train


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
def test_train_on_gpu_with_pinned_batches():
    model, train_loader, test_loader, loss_fn, optimizer = course_setup(256, 64, device="cuda")
    assert train_loader.pin_memory
    history = fit(model, train_loader, test_loader, loss_fn, optimizer, "cuda", epochs=2,
                  progress=False, log=None)
    assert history.label == "cuda"
    assert all(type(x) is float for x in history.train_loss + history.test_accuracy)
    assert history.train_loss[-1] < history.train_loss[0]
    assert next(model.parameters()).device.type == "cuda"


def wrong_arguments():
    """(call, the error it must raise, the start of its message): each notebook function given a wrong type or value."""
    model = Tudui()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [(torch.rand(2, 3, 32, 32), torch.tensor([0, 1]))]
    loss = torch.nn.CrossEntropyLoss()

    def fit(**kw):
        return tudui.fit(**{"model": model, "train_loader": loader, "test_loader": loader, "loss_fn": loss,
                            "optimizer": opt, "device": "cpu", "epochs": 1, "log": None, "progress": False, **kw})

    return [
        (lambda: fit(epochs=-1), ValueError, "epochs=-1 is out of range: it must be at least 0"),
        (lambda: fit(epochs=2.5), TypeError, "epochs must be a whole number (int), not float"),
        (lambda: fit(start_epoch=True), TypeError, "start_epoch must be a whole number (int), not bool"),
        (lambda: fit(optimizer=None), TypeError, "optimizer must be Optimizer, not NoneType"),
        (lambda: fit(train_loader=5), TypeError, "train_loader must be Iterable, not int"),
        (lambda: fit(test_loader=None), TypeError, "test_loader must be Iterable, not NoneType"),
        (lambda: fit(model="tudui"), TypeError, "model must be Module, not str"),
        (lambda: fit(loss_fn="mse"), TypeError, "loss_fn must be Callable, not str"),
        (lambda: tudui.train_one_epoch(model, loader, loss, None, "cpu"), TypeError, "optimizer must be Optimizer, not NoneType"),
        (lambda: tudui.evaluate(model, 3, loss, "cpu"), TypeError, "loader must be Iterable, not int"),
        (lambda: tudui.load_checkpoint("x.pth", None), TypeError, "model must be Module, not NoneType"),
        (lambda: tudui.load_checkpoint("x.pth", model, optimizer="sgd"), TypeError,
         "optimizer must be Optimizer, not str"),
        (lambda: tudui.load_checkpoint(3, model), TypeError, "path must be str or bytes or PathLike, not int"),
    ]


@pytest.mark.parametrize("case", range(len(wrong_arguments())))
def test_a_wrong_argument_is_named_before_torch_meets_it(case):
    call, error, says = wrong_arguments()[case]
    with pytest.raises(error) as err:
        call()
    assert str(err.value) == says


def test_a_wrong_argument_is_named_in_the_language_in_force(monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    call, _, _ = wrong_arguments()[0]
    with pytest.raises(ValueError, match="^epochs=-1 超出了范围：它应该不小于 0$"):
        call()
    with pytest.raises(TypeError, match=r"^epochs 应该是 整数（int），而不是 float$"):
        wrong_arguments()[1][0]()
