"""The fast path: the whole dataset as one tensor on the device, batches by index."""
from __future__ import annotations

import numpy as np
import torch


class ResidentLoader:
    """Iterates (images, targets) batches of a CIFAR10-like dataset held on ``device``.

    The uint8 images are copied to the device once and converted there to the
    same floats ``ToTensor()`` gives (``/255``, NCHW). Each epoch shuffles by
    index on the device: no PIL, no per-item Python, no host-to-device copies.
    """

    pin_memory = False  # batches are already on the device

    def __init__(self, dataset, batch_size=64, device="cpu", shuffle=True, seed=0, drop_last=False):
        self.device = torch.device(device)
        data = torch.from_numpy(np.ascontiguousarray(dataset.data)).to(self.device)
        self.images = data.permute(0, 3, 1, 2).float().div_(255).contiguous()
        self.targets = torch.as_tensor(dataset.targets, dtype=torch.long, device=self.device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.seed, self.epochs_done = seed, 0
        self.dataset = dataset

    def __len__(self):
        n = len(self.targets)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch):
        """Shuffle as epoch ``epoch`` (1, 2, ...) of an uninterrupted run does: fit() calls this,
        so a run resumed from a checkpoint sees the same batches as one never stopped."""
        if epoch != self.epochs_done + 1:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch - 1):
                self._order()
        self.epochs_done = epoch - 1

    def _order(self):
        n = len(self.targets)
        return (torch.randperm(n, device=self.device, generator=self.generator) if self.shuffle
                else torch.arange(n, device=self.device))

    def __iter__(self):
        self.epochs_done += 1
        order = self._order()
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.images[idx], self.targets[idx]


def resident_loaders(train_set, test_set, batch_size=64, device="cpu", distributed=False, seed=0):
    """Train and test ResidentLoaders, the counterpart of :func:`tudui.loaders`.

    ``distributed``: under torchrun each process keeps its own share, all shares
    the same size (padded by wrapping around, as DistributedSampler does): DDP
    needs the same number of batches on every rank.
    """
    from types import SimpleNamespace

    import torch.distributed as dist

    def share(dataset):
        if not distributed:
            return dataset
        rank, world = dist.get_rank(), dist.get_world_size()
        n = len(dataset.targets)
        mine = (np.arange(-(-n // world) * world) % n)[rank::world]
        return SimpleNamespace(data=dataset.data[mine], targets=np.asarray(dataset.targets)[mine])

    return (ResidentLoader(share(train_set), batch_size, device, shuffle=True, seed=seed),
            ResidentLoader(share(test_set), batch_size, device, shuffle=False, seed=seed))
