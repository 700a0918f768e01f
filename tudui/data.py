"""CIFAR-10 as the course loads it, a synthetic stand-in, and DataLoaders."""
from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.transforms import ToTensor

CLASSES = ["airplane", "automobile", "bird", "cat", "deer",
           "dog", "frog", "horse", "ship", "truck"]
SOURCES = ("auto", "cifar10", "synthetic")
SIZES = {True: 50_000, False: 10_000}


class DataError(RuntimeError):
    """The data asked for cannot be provided."""


class SyntheticCIFAR10(torchvision.datasets.VisionDataset):
    """A deterministic, learnable stand-in with CIFAR10's interface.

    Each class has a smooth colour pattern; an image is its class pattern,
    shifted, dimmed and noised. ``.data`` is uint8 NHWC, ``.targets`` a list,
    and items go through PIL and the transform exactly like CIFAR10's.
    """

    is_synthetic = True
    classes = CLASSES

    def __init__(self, train=True, transform=None, target_transform=None, size=None, seed=0):
        super().__init__(root="synthetic", transform=transform, target_transform=target_transform)
        self.train = train
        n = SIZES[train] if size is None else size
        self.data, self.targets = _synthetic_images(n, seed, split=0 if train else 1)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = Image.fromarray(self.data[index]), self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target

    def extra_repr(self):
        return f"Split: {'Train' if self.train else 'Test'} (synthetic stand-in for CIFAR-10)"


def _class_patterns(seed: int) -> np.ndarray:
    """Ten 36x36 RGB patterns of 9x9-pixel blocks, each colour channel on or off.

    The on/off codes are rows of a Hadamard matrix (columns shuffled by the
    seed), so any two classes differ in half of their 48 blocks.
    """
    rng = np.random.default_rng([seed, 10])
    hadamard = np.array([[1]])
    while len(hadamard) < 64:
        hadamard = np.block([[hadamard, hadamard], [hadamard, -hadamard]])
    codes = hadamard[1:11][:, rng.permutation(64)[:48]] > 0
    blocks = codes.reshape(10, 4, 4, 3).astype(np.float32)
    return blocks.repeat(9, axis=1).repeat(9, axis=2)


def _synthetic_images(n: int, seed: int, split: int, chunk: int = 1000):
    """n images, built in fixed chunks so that a smaller n is a prefix of a larger."""
    patterns = _class_patterns(seed)
    images, labels = [], []
    for c in range(0, n, chunk):
        rng = np.random.default_rng([seed, split, c // chunk])
        y = rng.integers(0, 10, chunk)
        dx, dy = rng.integers(0, 2, chunk), rng.integers(0, 2, chunk)
        crops = np.stack([patterns[k, a:a + 32, b:b + 32] for k, a, b in zip(y, dy, dx)])
        gain = rng.uniform(0.8, 1.0, (chunk, 1, 1, 1)).astype(np.float32)
        noise = rng.normal(0, 0.1, crops.shape).astype(np.float32)
        images.append(np.clip((crops * gain + noise) * 255, 0, 255).round().astype(np.uint8))
        labels.append(y)
    return np.concatenate(images)[:n], np.concatenate(labels)[:n].tolist()


def default_source() -> str:
    """The data source to use when none is given: $TUDUI_DATA, else "auto"."""
    source = os.environ.get("TUDUI_DATA", "auto").strip().lower() or "auto"
    if source not in SOURCES:
        raise DataError(f"TUDUI_DATA={source!r} is not a data source; use one of {', '.join(SOURCES)}")
    return source


def _real_cifar10(train: bool, root: str, download: bool):
    return torchvision.datasets.CIFAR10(root, train=train, transform=ToTensor(), download=download)


def cifar10(train=True, root="data", source=None, limit=None, seed=0):
    """CIFAR-10 with ``ToTensor()``, the course's preprocessing.

    source: ``"auto"`` (real CIFAR-10 from ``root``, downloading it if needed,
    else the synthetic stand-in, said in one line), ``"cifar10"`` (the real set
    or a DataError), ``"synthetic"`` (the stand-in). Default: $TUDUI_DATA or auto.
    limit: keep only the first ``limit`` images (a deterministic subset).
    """
    source = default_source() if source is None else source
    if source not in SOURCES:
        raise DataError(f"unknown data source {source!r}; use one of {', '.join(SOURCES)}")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of images, got {limit}")
    split = "train" if train else "test"
    if source == "synthetic":
        return SyntheticCIFAR10(train, transform=ToTensor(), size=limit, seed=seed)
    try:
        ds = _real_cifar10(train, root, download=False)
    except RuntimeError:
        try:
            ds = _real_cifar10(train, root, download=True)
        except Exception as exc:  # no network, disk full, bad archive ...
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if source == "cifar10":
                raise DataError(
                    f"CIFAR-10 ({split}) is not in {os.path.abspath(root)!r} and could not be downloaded "
                    f"({reason}); download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html "
                    f"and extract it into {root!r}") from None
            print(f"CIFAR-10 not found in {root!r} and not downloadable ({reason}): "
                  f"using the synthetic stand-in for the {split} set", file=sys.stderr)
            return SyntheticCIFAR10(train, transform=ToTensor(), size=limit, seed=seed)
    if limit is not None:
        ds.data, ds.targets = ds.data[:limit], ds.targets[:limit]
    return ds


def is_synthetic(dataset) -> bool:
    """True for the synthetic stand-in."""
    return getattr(dataset, "is_synthetic", False)


def describe_data(dataset) -> str:
    """One line naming the data: real CIFAR-10 or the synthetic stand-in."""
    kind = "synthetic stand-in for CIFAR-10" if is_synthetic(dataset) else "CIFAR-10"
    split = "train" if getattr(dataset, "train", True) else "test"
    return f"{kind}, {split} set, {len(dataset):,} images"


def default_num_workers() -> int:
    """DataLoader workers that suit the place: none on 1-2 cores (Binder, Colab, small laptops)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 if cores <= 2 else min(4, cores - 1)


def loaders(train_set, test_set, batch_size=64, device="cpu", num_workers=None, shuffle=True,
            distributed=False, seed=0):
    """Train and test DataLoaders with settings that suit ``device``.

    pin_memory only for CUDA (page-locked memory lets copies overlap compute);
    workers only where there are cores to spare. ``distributed``: under
    torchrun, each process reads its own share through a DistributedSampler
    (shuffled from ``seed``; fit() calls its set_epoch).
    """
    device = torch.device(device)
    workers = default_num_workers() if num_workers is None else num_workers
    kwargs = dict(batch_size=batch_size, num_workers=workers, pin_memory=device.type == "cuda",
                  persistent_workers=workers > 0)
    if distributed:
        return (DataLoader(train_set, sampler=DistributedSampler(train_set, shuffle=shuffle, seed=seed), **kwargs),
                DataLoader(test_set, sampler=DistributedSampler(test_set, shuffle=False), **kwargs))
    return (DataLoader(train_set, shuffle=shuffle, **kwargs),
            DataLoader(test_set, shuffle=False, **kwargs))
