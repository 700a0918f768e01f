"""The fast path: the whole dataset as one tensor on the device, batches by index."""
import numbers
from types import SimpleNamespace

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from .text import say


class ResidentLoader:
    """Iterates (images, targets) batches of a CIFAR10-like dataset (``.data``, ``.targets``) held on ``device``.
    The uint8 images become the floats ``ToTensor()`` gives (``/255``, NCHW) on the CPU, bit for bit, then go to
    the device in one copy. Batches are picked by index on the device, in an order drawn on the CPU once per
    epoch: no PIL, no per-item Python, no host-to-device copy per batch."""

    def __init__(self, dataset, batch_size=64, device="cpu", shuffle=True, seed=0, drop_last=False):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(say("resident.bad_batch_size", batch_size=batch_size))
        self.device = torch.device(device)
        images = torch.from_numpy(np.ascontiguousarray(dataset.data)).permute(0, 3, 1, 2).contiguous()
        # Divide on the CPU, as ToTensor() does: CUDA turns x / 255 into x * (1/255), off by one ulp at times.
        self.images = images.float().div_(255).to(self.device)
        self.targets = torch.as_tensor(dataset.targets, dtype=torch.long).to(self.device)
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.generator = torch.Generator()  # on the CPU: the same permutations on every device
        self.set_epoch(0)

    def __len__(self):
        n = len(self.targets)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch):
        """Shuffle as ``DistributedSampler.set_epoch`` does: by (seed, epoch) alone, so a run resumed at
        epoch k sees the batches of an uninterrupted run. Without it each pass draws the next permutation."""
        self.generator.manual_seed(self.seed + epoch)

    def __iter__(self):
        n = len(self.targets)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        order = order.to(self.device)  # one small copy per epoch
        for batch in order.split(self.batch_size)[:len(self)]:  # [:len(self)] drops a short last one if drop_last
            yield self.images[batch], self.targets[batch]


def _share(dataset):
    """This process's share under torchrun: the indices DistributedSampler gives it (the same count on
    every process: DDP needs the same number of batches everywhere)."""
    mine = list(DistributedSampler(dataset, shuffle=False))
    return SimpleNamespace(data=dataset.data[mine], targets=np.asarray(dataset.targets)[mine])


def resident_loaders(train_set, test_set, batch_size=64, device="cpu", distributed=False, seed=0):
    """Train and test ResidentLoaders, the counterpart of :func:`tudui.loaders`; ``distributed``: under
    torchrun each process keeps only its own share of each set on its device."""
    if distributed:
        train_set, test_set = _share(train_set), _share(test_set)
    return (ResidentLoader(train_set, batch_size, device, shuffle=True, seed=seed),
            ResidentLoader(test_set, batch_size, device, shuffle=False, seed=seed))
