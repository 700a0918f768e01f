"""ResidentLoader (the whole dataset on the device) and resident_loaders (its shares under torchrun)."""
import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from tudui import ResidentLoader, cifar10, loaders, resident_loaders


@pytest.fixture(scope="module")
def dataset():
    return cifar10(True, source="synthetic", limit=50)


class Numbered:
    """A CIFAR10-like dataset whose target is the image's index (image i is filled with i % 256)."""

    def __init__(self, n):
        pixels = (np.arange(n) % 256).astype(np.uint8)[:, None, None, None]
        self.data, self.targets = np.broadcast_to(pixels, (n, 32, 32, 3)), list(range(n))

    def __len__(self):
        return len(self.targets)


def epoch_orders(loader, epochs):
    return [torch.cat([t for _, t in loader]).tolist() for _ in range(epochs)]


def test_same_batches_as_totensor_through_the_dataloader(dataset):
    resident = ResidentLoader(dataset, batch_size=16, device="cpu", shuffle=False)
    reference = DataLoader(dataset, batch_size=16, shuffle=False)
    ours, theirs = list(resident), list(reference)
    assert len(ours) == len(theirs) == 4
    for (imgs, targets), (ref_imgs, ref_targets) in zip(ours, theirs):
        assert imgs.dtype == torch.float32 and targets.dtype == torch.long
        assert torch.equal(imgs, ref_imgs)  # bit for bit, not merely close
        assert torch.equal(targets, ref_targets)


def test_the_conversion_is_done_before_the_copy_to_the_device(dataset, monkeypatch):
    """On a GPU, x / 255 is x * (1/255): one ulp off for many pixels. So the floats are made on the
    CPU, as ToTensor() makes them, and what travels to the device is already those floats."""
    moved = []
    real_to = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        result = real_to(self, *args, **kwargs)
        if result.device.type == "meta" and self.device.type == "cpu":
            moved.append((self.dtype, self.clone()))
        return result

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    ResidentLoader(dataset, batch_size=16, device="meta", shuffle=False)
    images = [x for dtype, x in moved if x.dim() == 4]
    assert len(images) == 1 and images[0].dtype == torch.float32
    reference = torch.stack([dataset[i][0] for i in range(len(dataset))])
    assert torch.equal(images[0], reference)


def test_len_and_drop_last(dataset):
    assert len(ResidentLoader(dataset, batch_size=16)) == 4  # 50 = 3 x 16 + 2
    assert len(ResidentLoader(dataset, batch_size=10)) == 5
    assert len(ResidentLoader(dataset, batch_size=64)) == 1
    dropping = ResidentLoader(dataset, batch_size=16, drop_last=True)
    assert len(dropping) == 3
    assert [len(t) for _, t in dropping] == [16, 16, 16]
    assert [len(t) for _, t in ResidentLoader(dataset, batch_size=16, shuffle=False)] == [16, 16, 16, 2]


@pytest.mark.parametrize("batch_size", [0, -4, 2.5, "64", True])
def test_batch_size_must_be_a_positive_whole_number(dataset, batch_size):
    with pytest.raises(ValueError, match=r"batch_size must be a positive whole number, got"):
        ResidentLoader(dataset, batch_size=batch_size)


def test_shuffle_is_a_permutation_fixed_by_the_seed():
    data = Numbered(40)
    a = epoch_orders(ResidentLoader(data, batch_size=8, seed=5), 3)
    b = epoch_orders(ResidentLoader(data, batch_size=8, seed=5), 3)
    c = epoch_orders(ResidentLoader(data, batch_size=8, seed=6), 3)
    assert a == b
    assert a != c
    assert a[0] != a[1] != a[2]  # without set_epoch, each pass draws a new order
    for order in a + c:
        assert sorted(order) == list(range(40))
    assert epoch_orders(ResidentLoader(data, batch_size=8, shuffle=False), 1)[0] == list(range(40))


def test_images_follow_their_targets_when_shuffled():
    data = Numbered(24)
    for imgs, targets in ResidentLoader(data, batch_size=5, seed=1):
        assert torch.equal(imgs[:, 0, 0, 0], targets.float() / 255)


def test_set_epoch_shuffles_as_distributed_sampler_does():
    """The order of epoch k depends on (seed, k) alone: what fit() relies on to resume."""
    data = Numbered(30)
    stepped = ResidentLoader(data, batch_size=7, seed=3)  # fit calls set_epoch(1), (2), ... in turn
    orders = []
    for epoch in (1, 2, 3, 4):
        stepped.set_epoch(epoch)
        orders += epoch_orders(stepped, 1)
    for k in (4, 2, 1):  # a fresh loader, in any order of epochs
        fresh = ResidentLoader(data, batch_size=7, seed=3)
        fresh.set_epoch(k)
        assert epoch_orders(fresh, 1)[0] == orders[k - 1]
        sampler = DistributedSampler(range(30), num_replicas=1, rank=0, shuffle=True, seed=3)
        sampler.set_epoch(k)
        assert list(sampler) == orders[k - 1]  # torch's own sampler gives the same order
    assert len({tuple(o) for o in orders}) == 4


def test_the_same_batches_as_tudui_loaders(dataset):
    """Single process: for the same seed and epoch, both loaders yield the very same batches."""
    data_loader, _ = loaders(dataset, dataset, batch_size=16, num_workers=0, seed=7)
    resident = ResidentLoader(dataset, batch_size=16, seed=7)
    for epoch in (1, 2):
        data_loader.sampler.set_epoch(epoch)
        resident.set_epoch(epoch)
        for (a, ta), (b, tb) in zip(data_loader, resident, strict=True):
            assert torch.equal(a, b) and torch.equal(ta, tb)


def test_the_shuffle_runs_on_the_cpu_whatever_the_device(dataset):
    """A CPU generator: no device generator (MPS's randperm has refused CPU/MPS generator mixes)."""
    loader = ResidentLoader(dataset, batch_size=8, device="meta", seed=2)
    assert loader.generator.device.type == "cpu"
    imgs, targets = next(iter(loader))
    assert imgs.device.type == targets.device.type == "meta"
    assert imgs.shape == (8, 3, 32, 32)


def test_batches_live_on_the_device(dataset):
    loader = ResidentLoader(dataset, batch_size=8, device=torch.device("cpu"))
    assert loader.device == torch.device("cpu")
    imgs, targets = next(iter(loader))
    assert imgs.device.type == targets.device.type == "cpu"
    assert imgs.shape == (8, 3, 32, 32) and imgs.is_contiguous()


# --- resident_loaders ---------------------------------------------------------------------------

def test_resident_loaders_single_process(dataset):
    test_set = cifar10(False, source="synthetic", limit=20)
    train, test = resident_loaders(dataset, test_set, batch_size=16, seed=4)
    assert (train.shuffle, test.shuffle) == (True, False)
    assert len(train.targets) == 50 and len(test.targets) == 20 and train.batch_size == 16
    assert torch.equal(test.targets, torch.tensor(test_set.targets))
    assert epoch_orders(train, 1) == epoch_orders(ResidentLoader(dataset, 16, seed=4), 1)


@pytest.fixture
def as_rank(monkeypatch):
    """``as_rank(rank, world)``: torch.distributed answers as process ``rank`` of ``world`` would."""
    def pretend(rank, world):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
        monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)
    return pretend


@pytest.mark.parametrize("n", [129, 130, 7, 1])
@pytest.mark.parametrize("world", [2, 3])
def test_shares_under_torchrun_are_distributed_sampler_shares(as_rank, n, world):
    """Each rank keeps the indices DistributedSampler gives it: equal sizes (DDP hangs when one rank
    has a batch more than another), and every image is in some share."""
    dataset = Numbered(n)
    shares = []
    for rank in range(world):
        as_rank(rank, world)
        train, test = resident_loaders(dataset, dataset, batch_size=32, distributed=True)
        expected = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
        assert test.targets.tolist() == expected
        assert sorted(train.targets.tolist()) == sorted(expected)
        shares.append(train)
    assert len({len(share) for share in shares}) == 1
    assert len({len(share.targets) for share in shares}) == 1
    assert set().union(*(share.targets.tolist() for share in shares)) == set(range(n))


@pytest.mark.gpu
def test_resident_on_gpu_equals_totensor_bit_for_bit(dataset):
    on_cpu = list(ResidentLoader(dataset, batch_size=16, device="cpu", shuffle=False))
    on_gpu = list(ResidentLoader(dataset, batch_size=16, device="cuda", shuffle=False))
    assert len(on_cpu) == len(on_gpu)
    for (a, ta), (b, tb) in zip(on_cpu, on_gpu):
        assert b.device.type == "cuda"
        assert torch.equal(b.cpu(), a) and torch.equal(tb.cpu(), ta)
    shuffled = ResidentLoader(dataset, batch_size=16, device="cuda", seed=1)
    on_cpu_shuffled = ResidentLoader(dataset, batch_size=16, device="cpu", seed=1)
    assert torch.cat([t for _, t in shuffled]).cpu().tolist() == epoch_orders(on_cpu_shuffled, 1)[0]
