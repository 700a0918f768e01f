"""The training and test loops of the lessons, with the device as a parameter (the ``.to(device)`` way)."""
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from .distributed import sum_across_ranks
from .text import checked, say


def run_epoch(model, loader, loss_fn, device, optimizer=None, progress=True):
    """One pass over ``loader``, training with an optimizer: mean loss, accuracy, images_per_s, seconds, images."""
    checked(nn.Module, model=model)
    checked(Iterable, loader=loader)
    checked(Callable, loss_fn=loss_fn)
    model.train(optimizer is not None)  # model.eval() to measure: the same as model.train(False)
    total_loss = torch.zeros((), device=device)  # sums stay on the device: no .item() per batch,
    correct = torch.zeros((), device=device)     # so the CPU never waits for the GPU inside the loop
    images = 0
    start = time.perf_counter()
    batches = tqdm(loader, say("split.test" if optimizer is None else "split.train"), leave=False, disable=not progress)
    for imgs, targets in batches:
        imgs = imgs.to(device, non_blocking=True)  # asynchronous from pinned memory, else a plain copy
        targets = targets.to(device, non_blocking=True)
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        total_loss += loss.detach() * len(targets)
        correct += (outputs.argmax(1) == targets).sum()
        images += len(targets)
    if images == 0:
        raise ValueError(say("loops.no_batches"))
    totals = torch.stack([total_loss, correct, torch.tensor(float(images), device=device)])
    loss_sum, correct_sum, all_images = sum_across_ranks(totals).tolist()  # one read; under torchrun: all ranks
    seconds = time.perf_counter() - start
    return {"loss": loss_sum / all_images, "accuracy": correct_sum / all_images,
            "images_per_s": all_images / seconds, "seconds": seconds, "images": int(all_images)}


def train_one_epoch(model, loader, loss_fn, optimizer, device, progress=True):
    """One pass over ``loader`` with updates. Returns loss, accuracy, images_per_s, seconds, images."""
    checked(torch.optim.Optimizer, optimizer=optimizer)  # without one it would only measure, silently
    return run_epoch(model, loader, loss_fn, device, optimizer, progress)


@torch.no_grad()
def evaluate(model, loader, loss_fn, device, progress=True):
    """Loss and accuracy over ``loader`` without updates (same keys as :func:`train_one_epoch`)."""
    return run_epoch(model, loader, loss_fn, device, None, progress)


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
        for key in ("loss", "accuracy"):
            getattr(self, f"train_{key}").append(train[key])
            getattr(self, f"test_{key}").append(test[key])
        self.seconds.append(train["seconds"])
        self.images_per_s.append(train["images_per_s"])


def fit(model, train_loader, test_loader, loss_fn, optimizer, device, epochs,
        start_epoch=0, on_epoch_end=None, progress=True, log=print, label=None):
    """Train for epochs ``start_epoch+1 .. epochs``; returns a :class:`History`. ``on_epoch_end(epoch, history)``
    runs after each epoch (e.g. to save a checkpoint); ``log`` gets one line per epoch, ``None`` for silence."""
    checked(torch.optim.Optimizer, optimizer=optimizer)
    checked(Iterable, train_loader=train_loader, test_loader=test_loader)
    checked(int, 0, epochs=epochs, start_epoch=start_epoch)
    history = History(label=label if label is not None else str(torch.device(device)))
    for epoch in range(start_epoch + 1, epochs + 1):
        for shuffler in (train_loader, getattr(train_loader, "sampler", None)):
            if hasattr(shuffler, "set_epoch"):  # the shuffle of epoch k depends on (seed, k) alone,
                shuffler.set_epoch(epoch)         # so a run resumed at epoch k sees the same batches
        train = train_one_epoch(model, train_loader, loss_fn, optimizer, device, progress)
        test = evaluate(model, test_loader, loss_fn, device, progress)
        history.append(epoch, train, test)
        if log:
            log(say("loops.epoch", epoch=epoch, train=train, test=test))
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
    return history
