"""CIFAR-10 as the course loads it (or the synthetic stand-in), DataLoaders and the fast path (the whole dataset on the
device, batches by index); the lessons' run settings: quick on a CPU or in tests, full size on a GPU with CIFAR-10."""
import numbers
import os
import socket
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets import CIFAR10
from torchvision.transforms import ToTensor

from .device import best_accelerator
from .synthetic import CLASSES, SyntheticCIFAR10
from .text import checked, one_line, say

SOURCES = ("auto", "cifar10", "synthetic")
DOWNLOAD_TIMEOUT_S = 30  # a download with no data for this long stops (a dead proxy would stall it for good)
QUICK = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
KAGGLE_WORKING = Path("/kaggle/working")    # a Kaggle notebook's output folder
MODELSCOPE_WORKSPACE = Path("/mnt/workspace")  # the working folder of ModelScope's (PAI-DSW) notebooks
AUTODL_DATA_DISK = "/root/autodl-tmp"  # every AutoDL instance's data disk (autodl.com/docs/env, read 2026-12)
MAX_SEED = 2**63 - 1  # the most torch.manual_seed and numpy take alike


class DataError(RuntimeError):
    """The data asked for cannot be provided."""


def default_source() -> str:
    """The data source to use when none is given: $TUDUI_DATA, else "auto"."""
    source = os.environ.get("TUDUI_DATA", "auto").strip().lower() or "auto"
    if source not in SOURCES:
        raise DataError(say("data.bad_env", source=source, sources=", ".join(SOURCES)))
    return source


def cifar10_on_disk(root="data") -> bool:
    """True when all of CIFAR-10's files are in ``root`` (checked by name only: fast, no download)."""
    folder = os.path.join(root, CIFAR10.base_folder)
    names = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    return all(os.path.isfile(os.path.join(folder, name)) for name in names)


def host() -> str | None:
    """Which notebook host runs this: "colab" (google.colab is loaded), "kaggle" ($KAGGLE_KERNEL_RUN_TYPE and
    /kaggle/working), "autodl" ($AutoDLContainerUUID or its data disk), "modelscope" (/mnt/workspace), else None."""
    if "google.colab" in sys.modules:
        return "colab"
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") and KAGGLE_WORKING.is_dir():
        return "kaggle"
    if os.environ.get("AutoDLContainerUUID") or os.path.isdir(AUTODL_DATA_DISK):  # False where /root is closed
        return "autodl"
    return "modelscope" if MODELSCOPE_WORKSPACE.is_dir() else None


def quick_mode(root="data") -> bool:
    """Should a lesson train on a small subset for a couple of epochs? $TUDUI_QUICK=1/0 decides when set. Otherwise
    full size only with an accelerator and real CIFAR-10 in ``root`` or a cloud notebook (:func:`host`) to download
    it: a CPU epoch takes minutes, and a full-size run without the data stops (it never trains on the stand-in)."""
    raw = os.environ.get("TUDUI_QUICK", "")
    flag = raw.strip().lower()
    if flag:
        if flag not in QUICK:
            raise ValueError(say("settings.bad_quick", raw=raw))
        return QUICK[flag]
    return not (default_source() != "synthetic" and best_accelerator() is not None
                and (cifar10_on_disk(root) or host() is not None))


def _split(train: bool, lang=None) -> str:
    return say("split.train" if train else "split.test", lang)


def _load_real(train: bool, root: str):
    """Real CIFAR-10 from ``root``, downloading it when it is not there; a DataError says why not."""
    folder = os.path.join(root, CIFAR10.base_folder)
    if os.path.isdir(folder) and not os.access(folder, os.R_OK | os.X_OK):
        raise DataError(say("data.unreadable_folder", path=folder))
    try:
        return CIFAR10(root, train=train, transform=ToTensor())
    except PermissionError as exc:
        raise DataError(say("data.unreadable", path=exc.filename)) from None
    except RuntimeError:  # a file is missing or fails its checksum: download (or re-extract the archive)
        damaged = os.path.isdir(folder)
    if not os.path.isfile(os.path.join(root, CIFAR10.filename)):
        print(say("data.download", root=os.path.abspath(root), seconds=DOWNLOAD_TIMEOUT_S), file=sys.stderr)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # for every connect and read, only while downloading
    try:
        return CIFAR10(root, train=train, transform=ToTensor(), download=True)
    except Exception as exc:  # no network, a stall, disk full, a bad archive ...
        stalled = isinstance(getattr(exc, "reason", exc), TimeoutError)  # urllib's URLError has it as .reason
        reason = say("data.stalled", seconds=DOWNLOAD_TIMEOUT_S) if stalled else one_line(exc)
    finally:
        socket.setdefaulttimeout(before)
    raise DataError(say("data.damaged", folder=folder, reason=reason, root=root) if damaged else
                    say("data.missing", split=_split(train), where=os.path.abspath(root), reason=reason, root=root))


def _check_root(root):
    """``root`` is a folder, or none yet (the download makes it); not a file, a device or a path through a file."""
    try:
        is_folder = stat.S_ISDIR(os.stat(root).st_mode)
    except (NotADirectoryError, ValueError):  # through a file, a NUL byte
        is_folder = False
    except OSError:  # none yet; or unreadable, which the loader says
        return
    if not is_folder:
        raise DataError(say("data.root_not_folder", root=os.fspath(root)))


def cifar10(train=True, root="data", source=None, limit=None, seed=0, full=None):
    """CIFAR-10 with ``ToTensor()``, the course's preprocessing; ``limit``: only its first images. source (default
    $TUDUI_DATA or auto): ``"auto"`` (real CIFAR-10 from ``root``, downloaded if needed; else a quick run takes the
    stand-in, said in one line, and a ``full``-size run, default ``not quick_mode(root)``, stops), ``"cifar10"``
    (the real set or a DataError), ``"synthetic"``."""
    source = default_source() if source is None else source
    if source not in SOURCES:
        raise DataError(say("data.bad_source", source=source, sources=", ".join(SOURCES)))
    checked(int, 1, limit=limit) if limit is not None else None
    checked(int, 0, MAX_SEED, seed=seed)
    if source != "synthetic":
        _check_root(root)  # said in one line, before anything is printed: no download into a file
        try:
            ds = _load_real(train, root)
            ds.data, ds.targets = ds.data[:limit], ds.targets[:limit]
            return ds
        except DataError as exc:
            if source == "cifar10":
                raise
            if full or (full is None and not quick_mode(root)):
                raise DataError(say("data.full_size", problem=exc, where=os.path.abspath(root))) from None
            print(say("data.fallback", problem=exc, split=_split(train)), file=sys.stderr)
    return SyntheticCIFAR10(train, transform=ToTensor(), size=limit, seed=seed)


def is_synthetic(dataset) -> bool:
    """True for the synthetic stand-in."""
    return getattr(dataset, "is_synthetic", False)


def describe_data(dataset, lang=None) -> str:
    """One line naming the data: real CIFAR-10 or the synthetic stand-in, in ``lang`` (default: the one in force)."""
    kind = say("data.synthetic" if is_synthetic(dataset) else "data.cifar10", lang)
    return say("data.describe", lang, kind=kind, split=_split(getattr(dataset, "train", True), lang), n=len(dataset))


def default_num_workers() -> int:
    """DataLoader workers: none on 1-2 cores (Binder, Colab); torchrun's $LOCAL_WORLD_SIZE processes share the cores."""
    if os.name == "nt":  # Windows starts workers with spawn: seconds per start, more than they save here
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    sharing = os.environ.get("LOCAL_WORLD_SIZE", "1")
    plain = sharing.strip().isascii() and sharing.strip().isdigit() and len(sharing) < 10  # not "²", not 5,000 digits
    cores //= max(int(sharing), 1) if plain else 1  # torchrun sets it; ignore other values
    return 0 if cores <= 2 else min(4, cores - 1)


def loaders(train_set, test_set, batch_size=64, device="cpu", num_workers=None, shuffle=True,
            distributed=False, seed=0):
    """Train and test DataLoaders that suit ``device``: pin_memory for CUDA (copies overlap compute), workers where
    there are cores to spare. The train sampler shuffles by (seed, epoch): :func:`tudui.fit` calls its ``set_epoch``,
    so a resumed run sees an uninterrupted run's batches. ``distributed``: each torchrun process reads its share."""
    checked(int, 0, MAX_SEED, seed=seed)
    workers = default_num_workers() if num_workers is None else num_workers
    one_process = {} if distributed else {"num_replicas": 1, "rank": 0}
    train_sampler = DistributedSampler(train_set, shuffle=shuffle, seed=seed, **one_process)
    test_sampler = DistributedSampler(test_set, shuffle=False) if distributed else None

    def loader(dataset, sampler):
        return DataLoader(dataset, batch_size, sampler=sampler, num_workers=workers,
                          pin_memory=torch.device(device).type == "cuda", persistent_workers=workers > 0,
                          generator=torch.Generator().manual_seed(seed))  # worker seeds: not the global RNG

    return loader(train_set, train_sampler), loader(test_set, test_sampler)


class ResidentLoader:
    """(images, targets) batches of a CIFAR10-like dataset (``.data``, ``.targets``) held on ``device``: the floats
    ``ToTensor()`` gives, bit for bit, copied once; batches picked by index on the device, in an order drawn on the CPU
    once per epoch. No PIL, no per-item Python, no host-to-device copy per batch."""

    def __init__(self, dataset, batch_size=64, device="cpu", shuffle=True, seed=0, drop_last=False):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(say("resident.bad_batch_size", batch_size=batch_size))
        checked(int, 0, MAX_SEED, seed=seed)
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


def resident_loaders(train_set, test_set, batch_size=64, device="cpu", distributed=False, seed=0):
    """Train and test ResidentLoaders, the counterpart of :func:`tudui.loaders`; ``distributed``: each torchrun
    process keeps its share on its device (DistributedSampler's indices: as many on every process, as DDP needs)."""
    if distributed:
        shares = [list(DistributedSampler(s, shuffle=False)) for s in (train_set, test_set)]
        train_set, test_set = (SimpleNamespace(data=s.data[mine], targets=np.asarray(s.targets)[mine])
                               for s, mine in zip((train_set, test_set), shares))
    return (ResidentLoader(train_set, batch_size, device, shuffle=True, seed=seed),
            ResidentLoader(test_set, batch_size, device, shuffle=False, seed=seed))
