"""Training and test loops with the device as a parameter (the ``.to(device)`` way)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from .device import synchronize
from .distributed import sum_across_ranks


def _move(imgs, targets, device, non_blocking):
    return imgs.to(device, non_blocking=non_blocking), targets.to(device, non_blocking=non_blocking)


def _non_blocking(loader, device) -> bool:
    """Asynchronous copies only make sense from pinned memory to a CUDA device."""
    return torch.device(device).type == "cuda" and getattr(loader, "pin_memory", False)


def _run(model, loader, loss_fn, device, optimizer, progress, desc):
    device = torch.device(device)
    non_blocking = _non_blocking(loader, device)
    total_loss = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = 0
    synchronize(device)
    start = time.perf_counter()
    for imgs, targets in tqdm(loader, desc=desc, leave=False, disable=not progress):
        imgs, targets = _move(imgs, targets, device, non_blocking)
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        # Accumulate on the device: no .item() here, so no sync per batch.
        total_loss += loss.detach() * targets.size(0)
        correct += (outputs.argmax(1) == targets).sum()
        seen += targets.size(0)
    # Under torchrun: totals over all processes (one all_reduce per epoch).
    totals = sum_across_ranks(torch.stack([total_loss, correct.to(total_loss.dtype),
                                           torch.tensor(float(seen), device=device)])).tolist()
    seconds = time.perf_counter() - start
    loss_sum, correct_sum, seen = totals[0], totals[1], max(totals[2], 1)
    return {"loss": loss_sum / seen, "accuracy": correct_sum / seen,
            "images_per_s": seen / seconds, "seconds": seconds, "images": int(seen)}


def train_one_epoch(model, loader, loss_fn, optimizer, device, progress=True):
    """One pass over ``loader`` with updates. Returns loss, accuracy, images_per_s, seconds."""
    model.train()
    return _run(model, loader, loss_fn, device, optimizer, progress, "train")


@torch.no_grad()
def evaluate(model, loader, loss_fn, device, progress=True):
    """Loss and accuracy over ``loader`` without updates."""
    model.eval()
    return _run(model, loader, loss_fn, device, None, progress, "test")


@dataclass
class History:
    """Per-epoch results of :func:`fit`; ``label`` names the run in plots."""
    label: str = ""
    epochs: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    train_accuracy: list = field(default_factory=list)
    test_loss: list = field(default_factory=list)
    test_accuracy: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    images_per_s: list = field(default_factory=list)

    def append(self, epoch, train, test):
        self.epochs.append(epoch)
        self.train_loss.append(train["loss"])
        self.train_accuracy.append(train["accuracy"])
        self.test_loss.append(test["loss"])
        self.test_accuracy.append(test["accuracy"])
        self.seconds.append(train["seconds"])
        self.images_per_s.append(train["images_per_s"])


def fit(model, train_loader, test_loader, loss_fn, optimizer, device, epochs,
        start_epoch=0, on_epoch_end=None, progress=True, log=print, label=None):
    """Train for epochs ``start_epoch+1 .. epochs``; returns a :class:`History`.

    ``on_epoch_end(epoch, history)`` runs after each epoch (e.g. to save a checkpoint).
    ``log`` gets one line per epoch; pass ``None`` for silence.
    """
    history = History(label=label if label is not None else str(torch.device(device)))
    for epoch in range(start_epoch + 1, epochs + 1):
        for shuffler in (train_loader, getattr(train_loader, "sampler", None)):
            if hasattr(shuffler, "set_epoch"):  # DistributedSampler, ResidentLoader: a new shuffle each
                shuffler.set_epoch(epoch)         # epoch, the same one when resuming at this epoch
        train = train_one_epoch(model, train_loader, loss_fn, optimizer, device, progress)
        test = evaluate(model, test_loader, loss_fn, device, progress)
        history.append(epoch, train, test)
        if log:
            log(f"epoch {epoch}: train loss {train['loss']:.3f}, test loss {test['loss']:.3f}, "
                f"test accuracy {test['accuracy']:.1%}")
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
    return history
