"""ResidentLoader (the whole dataset on the device) and the timing helpers."""
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tudui import ResidentLoader, Stopwatch, Timing, Tudui, cifar10, measure, train_step_speed


@pytest.fixture(scope="module")
def dataset():
    return cifar10(True, source="synthetic", limit=50)


def numbered(n):
    """A CIFAR10-like dataset whose target is the image's index (image i is filled with i)."""
    data = np.repeat(np.arange(n, dtype=np.uint8)[:, None, None, None], 32 * 32 * 3, axis=1).reshape(n, 32, 32, 3)
    return SimpleNamespace(data=data, targets=list(range(n)))


def epoch_orders(loader, epochs):
    return [torch.cat([t for _, t in loader]).tolist() for _ in range(epochs)]


def test_same_batches_as_totensor_through_the_dataloader(dataset):
    resident = ResidentLoader(dataset, batch_size=16, device="cpu", shuffle=False)
    reference = DataLoader(dataset, batch_size=16, shuffle=False)
    ours, theirs = list(resident), list(reference)
    assert len(ours) == len(theirs) == 4
    for (imgs, targets), (ref_imgs, ref_targets) in zip(ours, theirs):
        assert imgs.dtype == torch.float32 and targets.dtype == torch.long
        assert imgs.shape == ref_imgs.shape
        assert torch.equal(imgs, ref_imgs)
        assert torch.equal(targets, ref_targets)


def test_len_and_drop_last(dataset):
    assert len(ResidentLoader(dataset, batch_size=16)) == 4  # 50 = 3 x 16 + 2
    assert len(ResidentLoader(dataset, batch_size=10)) == 5
    assert len(ResidentLoader(dataset, batch_size=64)) == 1
    dropping = ResidentLoader(dataset, batch_size=16, drop_last=True)
    assert len(dropping) == 3
    sizes = [len(t) for _, t in dropping]
    assert sizes == [16, 16, 16]
    assert [len(t) for _, t in ResidentLoader(dataset, batch_size=16, shuffle=False)] == [16, 16, 16, 2]


def test_shuffle_is_a_permutation_fixed_by_the_seed():
    data = numbered(40)
    a = epoch_orders(ResidentLoader(data, batch_size=8, seed=5), 3)
    b = epoch_orders(ResidentLoader(data, batch_size=8, seed=5), 3)
    c = epoch_orders(ResidentLoader(data, batch_size=8, seed=6), 3)
    assert a == b
    assert a != c
    assert a[0] != a[1] != a[2]  # a new order each epoch
    for order in a + c:
        assert sorted(order) == list(range(40))
    assert epoch_orders(ResidentLoader(data, batch_size=8, shuffle=False), 1)[0] == list(range(40))


def test_images_follow_their_targets_when_shuffled():
    data = numbered(24)
    for imgs, targets in ResidentLoader(data, batch_size=5, seed=1):
        assert torch.equal(imgs[:, 0, 0, 0], targets.float() / 255)


def test_set_epoch_replays_the_uninterrupted_order():
    """What fit() relies on to resume: epoch k of a fresh loader is epoch k of one never stopped."""
    data = numbered(30)
    straight = epoch_orders(ResidentLoader(data, batch_size=7, seed=3), 4)
    for k in (1, 2, 4):
        fresh = ResidentLoader(data, batch_size=7, seed=3)
        fresh.set_epoch(k)
        assert epoch_orders(fresh, 1)[0] == straight[k - 1]
    stepped = ResidentLoader(data, batch_size=7, seed=3)  # fit calls set_epoch(1), (2), ... in turn
    orders = []
    for epoch in (1, 2, 3, 4):
        stepped.set_epoch(epoch)
        orders += epoch_orders(stepped, 1)
    assert orders == straight


def test_batches_live_on_the_device(dataset):
    loader = ResidentLoader(dataset, batch_size=8, device=torch.device("cpu"))
    assert loader.pin_memory is False and loader.device == torch.device("cpu")
    imgs, targets = next(iter(loader))
    assert imgs.device.type == targets.device.type == "cpu"
    assert imgs.shape == (8, 3, 32, 32) and imgs.is_contiguous()


# --- timing -------------------------------------------------------------------------------------

def test_measure_returns_repeat_positive_times():
    calls = []
    t = measure(lambda: calls.append(1), "cpu", repeat=4, warmup=2)
    assert isinstance(t, Timing)
    assert len(calls) == 6  # 2 untimed + 4 timed
    assert len(t.times) == 4 and all(x > 0 for x in t.times)
    assert t.best == min(t.times) and t.best <= t.median <= max(t.times)
    assert "median of 4" in str(t)


def test_measure_sees_the_work():
    t = measure(lambda: time.sleep(0.01), repeat=3, warmup=0)
    assert len(t.times) == 3
    assert t.median >= 0.01


def test_timing_median_and_best():
    t = Timing([0.3, 0.1, 0.2])
    assert t.median == 0.2 and t.best == 0.1
    assert str(t) == "200.00 ms (median of 3)"


def test_stopwatch_measures():
    with Stopwatch("cpu") as sw:
        time.sleep(0.02)
    assert 0.02 <= sw.seconds < 5
    with pytest.raises(ValueError):
        with Stopwatch() as failed:
            raise ValueError("not swallowed")
    assert failed.seconds >= 0


def test_train_step_speed_is_positive():
    speed = train_step_speed(Tudui(), "cpu", batch_size=4, steps=1)
    assert isinstance(speed, float) and speed > 0


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_resident_on_gpu_matches_cpu(dataset):
    on_cpu = list(ResidentLoader(dataset, batch_size=16, device="cpu", shuffle=False))
    on_gpu = list(ResidentLoader(dataset, batch_size=16, device="cuda", shuffle=False))
    assert len(on_cpu) == len(on_gpu)
    for (a, ta), (b, tb) in zip(on_cpu, on_gpu):
        assert b.device.type == "cuda"
        # /255 may round differently in the last bit on the GPU (it multiplies by 1/255)
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=1e-6)
        assert torch.equal(ta, tb.cpu())
    shuffled = ResidentLoader(dataset, batch_size=16, device="cuda", seed=1)
    first = torch.cat([t for _, t in shuffled]).cpu()
    assert sorted(first.tolist()) == sorted(dataset.targets)


@pytest.mark.gpu
def test_timing_on_gpu_waits_for_the_kernels():
    x = torch.rand(2048, 2048, device="cuda")
    t = measure(lambda: x @ x, "cuda", repeat=3, warmup=1)
    assert len(t.times) == 3 and all(s > 0 for s in t.times)
    with Stopwatch("cuda") as sw:
        for _ in range(10):
            x @ x
    assert sw.seconds > 0
