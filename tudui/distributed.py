"""Training on several devices with torchrun and DistributedDataParallel."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .device import pick_device


@dataclass
class Context:
    """Where this process stands: rank among world_size processes, on device."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(want="auto") -> Context:
    """Pick the device and, under torchrun, join the process group.

    Each process takes its own GPU (``cuda:LOCAL_RANK``) and the ``nccl``
    backend; on CPUs every process uses ``gloo``.
    """
    if not launched_by_torchrun():
        return Context(device=pick_device(want))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = pick_device(want)
    if device.type == "cuda":
        device = pick_device(f"cuda:{local}")
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend)
    return Context(rank, world, local, device, backend)


def teardown():
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def sum_across_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all processes (unchanged when not distributed)."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
