"""Training on several devices with torchrun and DistributedDataParallel (notebook 08). torchrun starts one process per
device and sets ``RANK`` (0 .. WORLD_SIZE-1 over all machines), ``LOCAL_RANK`` (the device on this machine) and
``WORLD_SIZE``; :func:`setup` reads them and joins the process group (``nccl`` on NVIDIA GPUs, ``gloo`` on CPUs)."""
import datetime
import os
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .device import DeviceError, pick_device
from .text import one_line, say

BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
JOIN_TIMEOUT = datetime.timedelta(minutes=10)  # joining, and any one collective (a barrier while rank 0 downloads)
TORCHRUN_SETS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # in every process it starts


class LaunchError(RuntimeError):
    """The torchrun environment (RANK, WORLD_SIZE, ...) is missing or malformed."""


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DistributedDataParallel / DataParallel / torch.compile."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


@dataclass
class Context:
    """Where this process stands: rank among world_size processes, on device."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None
    is_main = property(lambda self: self.rank == 0)  # rank 0: the one process that logs and writes files
    distributed = property(lambda self: self.world_size > 1)


def _env(name: str, default=None) -> int:
    """Environment variable ``name`` as a whole number, as torchrun sets it."""
    text = os.environ.get(name, default)
    try:
        return int(text)
    except (TypeError, ValueError):  # "²", 5,000 digits (over Python's 4,300), "abc"
        raise LaunchError(say("launch.not_whole", name=name, value=str(text)[:40])) from None


def launched_by_torchrun() -> bool:
    """True under torchrun with more than one process; a LaunchError for half a launch (``WORLD_SIZE=2`` by hand)."""
    if _env("WORLD_SIZE", "1") <= 1:
        return False
    missing = [name for name in TORCHRUN_SETS if not os.environ.get(name)]
    if missing:
        raise LaunchError(say("launch.half", missing=", ".join(missing)))
    return True


def _rendezvous() -> dict:
    """MASTER_ADDR and MASTER_PORT, refused at once where no process could ever meet (rather than a timeout's wait)."""
    addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise LaunchError(say("launch.bad_port", port=port[:40]))
    try:
        socket.getaddrinfo(addr, int(port))
    except (OSError, UnicodeError, ValueError) as exc:  # unknown name, too long, a NUL byte
        raise LaunchError(say("launch.bad_addr", addr=addr[:80], reason=one_line(exc, 80))) from None
    return {"addr": addr, "port": port}


def _device_for(want, local_rank: int) -> torch.device:
    """The device of the process with this local rank: cuda:LOCAL_RANK on GPUs, else the CPU."""
    if isinstance(want, str) and want.strip().lower() == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    device = pick_device(want)
    if device.type not in BACKENDS:
        raise DeviceError(say("launch.device_type", kind=device.type))
    if device.type == "cuda" and ":" in str(want):  # a numbered GPU: each process must take its own instead
        raise DeviceError(say("launch.numbered_gpu", want=want))
    if device.type == "cuda" and local_rank >= torch.cuda.device_count():
        raise DeviceError(say("launch.no_gpu_of_its_own", local_rank=local_rank, count=torch.cuda.device_count()))
    return torch.device("cuda", local_rank) if device.type == "cuda" else device


def setup(want="auto") -> Context:
    """The device and, under torchrun, the process group: each process its own GPU (``cuda:LOCAL_RANK``) with
    ``nccl`` (``gloo`` where torch has no NCCL, as on Windows), or ``gloo`` on CPUs."""
    if not launched_by_torchrun():
        return Context(device=pick_device(want))
    rank, world, local = _env("RANK"), _env("WORLD_SIZE"), _env("LOCAL_RANK")
    _env("LOCAL_WORLD_SIZE", "1")  # torchrun's; the DataLoader's workers are sized by it
    if not 0 <= rank < world:  # a process with no place in the group would wait for the others forever
        raise LaunchError(say("launch.rank_range", rank=rank, last=world - 1))
    device = _device_for(want, local)
    backend = BACKENDS[device.type] if dist.is_nccl_available() else "gloo"  # Windows builds have no NCCL
    if device.type == "cuda":
        torch.cuda.set_device(device)
    where = _rendezvous()  # said before the wait: a process started by hand may wait for peers that never come
    print(say("launch.waiting", rank=rank, world=world, seconds=JOIN_TIMEOUT.total_seconds(), **where),
          file=sys.stderr, flush=True)
    try:
        # device_id binds the group to this process's GPU (collectives and barriers use it).
        dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None,
                                timeout=JOIN_TIMEOUT)
    except (ValueError, TypeError, RuntimeError) as exc:  # DistError and DistStoreError are RuntimeErrors
        raise LaunchError(say("launch.cannot_join", reason=one_line(exc),
                              world=world, seconds=JOIN_TIMEOUT.total_seconds(), **where)) from None
    return Context(rank, world, local, device, backend)


def teardown():
    """Leave the process group if joined (twice is safe), on a clean exit once all arrive; free the DDP model first."""
    if dist.is_available() and dist.is_initialized():
        if sys.exc_info()[0] is None:  # no exception on its way out (after one, torchrun stops the others)
            dist.barrier()
        dist.destroy_process_group()


def barrier():
    """Wait until every process gets here (nothing to wait for when not distributed)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


@contextmanager
def main_first(ctx: Context):
    """Rank 0 runs the block first (downloading CIFAR-10), the others after it: one writer, whole files read."""
    if ctx.distributed and not ctx.is_main:
        barrier()
    yield
    if ctx.distributed and ctx.is_main:
        barrier()


def sum_across_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all processes, in place (unchanged when not distributed)."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
