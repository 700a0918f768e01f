"""CIFAR-10 as the course loads it (or its synthetic stand-in, see synthetic.py), and DataLoaders."""
import numbers
import os
import socket
import sys

import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets import CIFAR10
from torchvision.transforms import ToTensor

from .synthetic import CLASSES, SyntheticCIFAR10

SOURCES = ("auto", "cifar10", "synthetic")
DOWNLOAD_TIMEOUT_S = 30  # a firewall that drops packets would otherwise stall the download for minutes


class DataError(RuntimeError):
    """The data asked for cannot be provided."""


def default_source() -> str:
    """The data source to use when none is given: $TUDUI_DATA, else "auto"."""
    source = os.environ.get("TUDUI_DATA", "auto").strip().lower() or "auto"
    if source not in SOURCES:
        raise DataError(f"TUDUI_DATA={source!r} is not a data source; use one of {', '.join(SOURCES)}")
    return source


def cifar10_on_disk(root="data") -> bool:
    """True when all of CIFAR-10's files are in ``root`` (checked by name only: fast, no download)."""
    folder = os.path.join(root, CIFAR10.base_folder)
    names = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    return all(os.path.isfile(os.path.join(folder, name)) for name in names)


def _load_real(train: bool, root: str):
    """Real CIFAR-10 from ``root``, downloading it when it is not there; a DataError says why not."""
    folder = os.path.join(root, CIFAR10.base_folder)
    if os.path.isdir(folder) and not os.access(folder, os.R_OK | os.X_OK):
        raise DataError(f"cannot read {folder!r}: permission denied; fix its permissions or choose another root")
    try:
        return CIFAR10(root, train=train, transform=ToTensor())
    except PermissionError as exc:
        raise DataError(f"cannot read {exc.filename!r}: permission denied; fix its permissions") from None
    except RuntimeError:  # a file is missing or fails its checksum: download (or re-extract the archive)
        damaged = os.path.isdir(folder)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # only while downloading; restored below
    try:
        return CIFAR10(root, train=train, transform=ToTensor(), download=True)
    except Exception as exc:  # no network, a timeout, disk full, a bad archive ...
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        socket.setdefaulttimeout(before)
    if damaged:
        raise DataError(f"CIFAR-10 in {folder!r} is incomplete or damaged (a file is missing or fails its "
                        f"checksum) and a fresh copy could not be downloaded ({reason}); delete that folder "
                        f"and download again, or extract cifar-10-python.tar.gz into {root!r} again")
    raise DataError(f"CIFAR-10 ({'train' if train else 'test'}) is not in {os.path.abspath(root)!r} and could not be "
                    f"downloaded ({reason}); download cifar-10-python.tar.gz from "
                    f"https://www.cs.toronto.edu/~kriz/cifar.html and extract it into {root!r}")


def cifar10(train=True, root="data", source=None, limit=None, seed=0):
    """CIFAR-10 with ``ToTensor()``, the course's preprocessing.

    source: ``"auto"`` (real CIFAR-10 from ``root``, downloading it if needed, else the synthetic
    stand-in, said in one line), ``"cifar10"`` (the real set or a DataError), ``"synthetic"``.
    Default: $TUDUI_DATA or auto. limit: only the first ``limit`` images (at most the whole split).
    """
    source = default_source() if source is None else source
    if source not in SOURCES:
        raise DataError(f"unknown data source {source!r}; use one of {', '.join(SOURCES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1):
        raise DataError(f"limit must be a positive whole number of images, got {limit!r}")
    if source != "synthetic":
        try:
            ds = _load_real(train, root)
            ds.data, ds.targets = ds.data[:limit], ds.targets[:limit]
            return ds
        except DataError as exc:
            if source == "cifar10":
                raise
            print(f"{exc}: using the synthetic stand-in for the {'train' if train else 'test'} set", file=sys.stderr)
    return SyntheticCIFAR10(train, transform=ToTensor(), size=limit, seed=seed)


def is_synthetic(dataset) -> bool:
    """True for the synthetic stand-in."""
    return getattr(dataset, "is_synthetic", False)


def describe_data(dataset) -> str:
    """One line naming the data: real CIFAR-10 or the synthetic stand-in."""
    kind = "synthetic stand-in for CIFAR-10" if is_synthetic(dataset) else "CIFAR-10"
    split = "train" if getattr(dataset, "train", True) else "test"
    return f"{kind}, {split} set, {len(dataset):,} images"


def default_num_workers() -> int:
    """DataLoader worker processes that suit the place: none on 1-2 cores (Binder, Colab, small laptops);
    under torchrun the processes on this machine ($LOCAL_WORLD_SIZE) share its cores."""
    if os.name == "nt":  # Windows starts workers with spawn: seconds per start, more than they save here
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    sharing = os.environ.get("LOCAL_WORLD_SIZE", "1")
    cores //= max(int(sharing), 1) if sharing.strip().isdigit() else 1  # torchrun sets it; ignore other values
    return 0 if cores <= 2 else min(4, cores - 1)


def loaders(train_set, test_set, batch_size=64, device="cpu", num_workers=None, shuffle=True,
            distributed=False, seed=0):
    """Train and test DataLoaders with settings that suit ``device``.

    pin_memory for CUDA (page-locked memory lets copies overlap compute); workers only where there are
    cores to spare. The train sampler shuffles by (seed, epoch): call ``train_loader.sampler.set_epoch(epoch)``
    before each epoch, as :func:`tudui.fit` does, and a resumed run sees the batches of an uninterrupted one.
    ``distributed``: under torchrun each process reads its own share (the samplers ask torch.distributed).
    """
    workers = default_num_workers() if num_workers is None else num_workers
    one_process = {} if distributed else {"num_replicas": 1, "rank": 0}
    train_sampler = DistributedSampler(train_set, shuffle=shuffle, seed=seed, **one_process)
    test_sampler = DistributedSampler(test_set, shuffle=False) if distributed else None

    def loader(dataset, sampler):
        return DataLoader(dataset, batch_size, sampler=sampler, num_workers=workers,
                          pin_memory=torch.device(device).type == "cuda", persistent_workers=workers > 0,
                          generator=torch.Generator().manual_seed(seed))  # worker seeds: not the global RNG

    return loader(train_set, train_sampler), loader(test_set, test_sampler)
