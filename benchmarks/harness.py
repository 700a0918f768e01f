"""What the throughput benchmark trains and how it times it: small pieces, combined in throughput.py.

A timed run is a function of no arguments that trains one epoch. It is made from a loader
(anything that yields (images, targets) batches) and a step function (one training step on
one batch), or it calls tudui.train_one_epoch. Every ratio compares runs that share the loop
and differ only in the option under test.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

import tudui

NO_TENSOR_CORES = ("GTX 16", "MX450", "MX550")  # compute capability 7.5 without tensor cores


def autocast_dtype(device) -> torch.dtype | None:
    """The reduced precision ``torch.autocast`` should use on ``device``; None: none pays, train in fp32.

    bf16 only where the hardware has it: CUDA compute capability 8.0 (Ampere) and newer.
    ``torch.cuda.is_bf16_supported()`` also says True on a T4 (7.5), where bf16 is emulated
    and slow, so the capability of the device passed in decides. fp16 on 7.x GPUs with tensor
    cores and on MPS. None below 7.0 (Pascal runs fp16 at a fraction of fp32's speed) and on
    GTX 16xx and MX450/MX550 (7.5 without tensor cores, where fp16 training has long-open NaN reports).
    """
    device = torch.device(device)
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability >= (8, 0):
            return torch.bfloat16
        slow = capability < (7, 0) or any(n in torch.cuda.get_device_name(device) for n in NO_TENSOR_CORES)
        return None if slow else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16  # cpu, xpu


def grad_scaler(device, amp_dtype):
    """A GradScaler where fp16 gradients need one (they can underflow to zero), else None.

    MPS trains fp16 unscaled: its GradScaler and fused optimizers have had bugs
    (found_inf ignored) in the torch versions this project supports.
    """
    device = torch.device(device)
    if amp_dtype == torch.float16 and device.type in ("cuda", "cpu"):
        return torch.amp.GradScaler(device.type)
    return None


def seeded_tudui(device, channels_last=False, seed=0) -> torch.nn.Module:
    """The course's network, the same weights for every run made with the same seed."""
    torch.manual_seed(seed)
    model = tudui.Tudui().to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def sgd(model, fused=False) -> torch.optim.SGD:
    """The course's optimizer. fused=True updates all parameters in one kernel, and with a
    GradScaler it skips inf/NaN steps on the device: no ``.item()``, no sync per step."""
    return torch.optim.SGD(model.parameters(), lr=1e-2, fused=fused)


def training_step(device, channels_last=False, amp_dtype=None, fused=False, seed=0):
    """``step(images, targets)``: the course's forward, loss, zero_grad, backward, step, with options.

    channels_last: NHWC model and images. amp_dtype: forward and loss under ``torch.autocast``.
    A GradScaler comes with fp16 (see :func:`grad_scaler`), and then the optimizer is fused.
    The step's ``.model`` is the network it trains.
    """
    device = torch.device(device)
    model = seeded_tudui(device, channels_last, seed)
    scaler = grad_scaler(device, amp_dtype)
    optimizer = sgd(model, fused=fused or scaler is not None)
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = nullcontext() if amp_dtype is None else torch.autocast(device.type, dtype=amp_dtype)
    layout = torch.channels_last if channels_last else torch.contiguous_format

    def step(imgs, targets):
        with autocast:
            loss = loss_fn(model(imgs.contiguous(memory_format=layout)), targets)
        optimizer.zero_grad()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    step.model, step.optimizer, step.scaler = model, optimizer, scaler
    step.dtype = str(amp_dtype or torch.float32).replace("torch.", "")  # the precision of its matmuls
    return step


def resident_loader(dataset, batch_size, device, channels_last=False, seed=0):
    """A tudui.ResidentLoader; with channels_last its images are stored NHWC once, so that
    the step's conversion of each batch costs nothing."""
    loader = tudui.ResidentLoader(dataset, batch_size, device, seed=seed)
    if channels_last:
        loader.images = loader.images.contiguous(memory_format=torch.channels_last)
    return loader


def minimal_epoch(loader, step, device):
    """The course's loop: each batch to the device, one step; no counting, no logging."""
    for imgs, targets in loader:
        step(imgs.to(device), targets.to(device))


def minimal_run(loader, step, device):
    """A timed run: one epoch of :func:`minimal_epoch` per call."""
    def run():
        minimal_epoch(loader, step, device)
    run.loop, run.step, run.model, run.dtype = minimal_epoch, step, step.model, step.dtype
    return run


def tudui_run(loader, device, seed=0):
    """A timed run: one epoch of ``tudui.train_one_epoch`` (plain SGD, as the lessons) per call."""
    model = seeded_tudui(device, seed=seed)
    optimizer, loss_fn = sgd(model), torch.nn.CrossEntropyLoss()

    def run():
        tudui.train_one_epoch(model, loader, loss_fn, optimizer, device, progress=False)
    run.loop, run.model, run.dtype = tudui.train_one_epoch, model, "float32"
    return run
