"""Timing work honestly on any device: warm up, synchronise, take the median."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from .device import synchronize


@dataclass
class Timing:
    """Seconds per call from repeated runs (after warm-up)."""
    times: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def __str__(self):
        return f"{self.median * 1e3:.2f} ms (median of {len(self.times)})"


def measure(fn, device="cpu", repeat=5, warmup=1) -> Timing:
    """Time ``fn()`` on ``device``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    GPU work is asynchronous: the Python call returns before the kernels run,
    so we synchronise before starting and before stopping the clock.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(times)


class Stopwatch:
    """``with Stopwatch(device) as sw: ...`` then ``sw.seconds``; synchronises on exit."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        return False


def train_step_speed(model, device, batch_size=64, steps=10, lr=1e-2) -> float:
    """Measured training images/s of ``model`` on ``device`` with random data."""
    model = model.to(device)
    x = torch.rand(batch_size, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def steps_fn():
        for _ in range(steps):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    t = measure(steps_fn, device, repeat=3, warmup=1)
    return batch_size * steps / t.median


# ---------------------------------------------------------------------------
# What the model costs: FLOPs from the layer shapes, and the device's limit.

def flops_by_layer(model, input_size=(3, 32, 32)) -> list:
    """Forward FLOPs for one image in each Conv2d and Linear layer: ``[(name, layer, flops), ...]``.

    Counted from the shapes: a convolution does ``in_channels/groups x kh x kw``
    multiply-adds for every output value, a linear layer ``in_features`` per
    output value, and one multiply-add is 2 FLOPs. Pooling, biases and the
    loss are left out: next to these they are tiny.
    """
    rows, hooks = [], []

    def hook(name):
        def count(module, inputs, output):
            per_out = (module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
                       if isinstance(module, torch.nn.Conv2d) else module.in_features)
            rows.append((name, type(module).__name__, 2 * per_out * output[0].numel()))
        return count

    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            hooks.append(module.register_forward_hook(hook(name)))
    try:
        param = next(model.parameters())
        with torch.no_grad():
            model(torch.zeros(1, *input_size, device=param.device, dtype=param.dtype))
    finally:
        for h in hooks:
            h.remove()
    return rows


def forward_flops(model, input_size=(3, 32, 32)) -> int:
    """Forward FLOPs per image (see :func:`flops_by_layer`). Training costs about 3x this:
    the backward pass computes gradients for both the inputs and the weights of each layer."""
    return sum(flops for _, _, flops in flops_by_layer(model, input_size))


def autocast_dtype(device):
    """The reduced precision for ``torch.autocast`` on ``device``: bf16 where supported, else fp16."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16  # cpu, xpu


def matmul_flops_per_s(device, dtype=torch.float32, n=None, repeat=5) -> float:
    """Measured FLOP/s of a big square matmul on ``device``: a practical upper limit.

    n: matrix size (default 1024 on the CPU, 4096 on accelerators). On
    accelerators each timed call runs 10 matmuls so the clock sees more than
    launch overhead.
    """
    device = torch.device(device)
    n = n or (1024 if device.type == "cpu" else 4096)
    inner = 1 if device.type == "cpu" else 10
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)

    def matmuls():
        for _ in range(inner):
            a @ b

    t = measure(matmuls, device, repeat=repeat, warmup=2)
    return 2 * n ** 3 * inner / t.median


# ---------------------------------------------------------------------------
# Training loops to compare, and timing them fairly.

def minimal_train_epoch(model, loader, loss_fn, optimizer, device):
    """The course's training loop and nothing else (no counting, no logging)."""
    model.train()
    for imgs, targets in loader:
        imgs = imgs.to(device)
        targets = targets.to(device)
        outputs = model(imgs)
        loss = loss_fn(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def tuned_train_epoch(model, loader, loss_fn, optimizer, device, channels_last=False, amp_dtype=None,
                      scaler=None):
    """The minimal loop plus two speed options.

    channels_last: feed NHWC images (the model should be converted too:
    ``model.to(memory_format=torch.channels_last)``); convolutions on GPUs
    with tensor cores prefer this layout.
    amp_dtype: run forward and loss under ``torch.autocast`` in this dtype
    (``torch.bfloat16`` or ``torch.float16``; pass a GradScaler for float16).
    """
    device = torch.device(device)
    model.train()
    for imgs, targets in loader:
        imgs = imgs.to(device)
        targets = targets.to(device)
        if channels_last:
            imgs = imgs.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            outputs = model(imgs)
            loss = loss_fn(outputs, targets)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()


def interleaved(runs: dict, device="cpu", repeat=5, warmup=1) -> dict:
    """Time each ``runs[name]()`` ``repeat`` times, taking turns; returns ``{name: Timing}``.

    First ``warmup`` untimed rounds of all of them. Then round after round,
    each run once, the order reversed every other round (A B, B A, A B, ...):
    slow drift of the machine (clock speed, heat, other programs) then falls
    on all of them alike instead of on whichever ran last.
    """
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    timings = {name: Timing() for name in names}
    for r in range(repeat):
        for name in (names if r % 2 == 0 else names[::-1]):
            synchronize(device)
            start = time.perf_counter()
            runs[name]()
            synchronize(device)
            timings[name].times.append(time.perf_counter() - start)
    return timings


def speed_ratio(fast: Timing, slow: Timing) -> float:
    """How many times as fast ``fast`` is as ``slow``: the median of round-by-round ratios.

    Both must come from the same :func:`interleaved` call, so that round i
    of one ran next to round i of the other.
    """
    return statistics.median(s / f for f, s in zip(fast.times, slow.times))


def epoch_runner(dataset, device, kind="resident", loop="tudui", batch_size=64, channels_last=False,
                 amp_dtype=None, num_workers=None, seed=0):
    """A function that trains a Tudui (made once, seeded) for one epoch over ``dataset`` per call.

    kind: ``"dataloader"`` (the course's: PIL + ToTensor through a DataLoader,
    settings from :func:`tudui.loaders`), ``"resident"`` (:class:`tudui.ResidentLoader`)
    or ``"batches"`` (a list of batches already on the device: no loading at all).
    loop: ``"tudui"`` (:func:`tudui.train_one_epoch`), ``"minimal"`` (the
    course's loop) or ``"tuned"`` (the minimal loop with ``channels_last``
    and ``amp_dtype``). Set-up (data to the device, workers) happens here,
    not in the timed calls. The function's ``.model`` and ``.loader`` are the ones it trains with.
    """
    from .data import loaders
    from .loops import train_one_epoch
    from .model import Tudui
    from .resident import ResidentLoader

    device = torch.device(device)
    if kind == "dataloader":
        loader = loaders(dataset, dataset, batch_size, device, num_workers=num_workers)[0]
    elif kind == "resident":
        loader = ResidentLoader(dataset, batch_size, device, seed=seed)
    elif kind == "batches":
        loader = list(ResidentLoader(dataset, batch_size, device, shuffle=False))
    else:
        raise ValueError(f"kind must be dataloader, resident or batches, not {kind!r}")
    if channels_last and kind == "resident":  # convert once; the loop's own conversion is then free
        loader.images = loader.images.contiguous(memory_format=torch.channels_last)
    torch.manual_seed(seed)
    model = Tudui().to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    if loop == "tudui":
        def run():
            return train_one_epoch(model, loader, loss_fn, optimizer, device, progress=False)
    elif loop == "minimal":
        def run():
            return minimal_train_epoch(model, loader, loss_fn, optimizer, device)
    elif loop == "tuned":
        # fp16 gradients can underflow to zero: CUDA scales the loss to keep them (other devices: as is)
        scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 and device.type == "cuda" else None

        def run():
            return tuned_train_epoch(model, loader, loss_fn, optimizer, device, channels_last, amp_dtype, scaler)
    else:
        raise ValueError(f"loop must be tudui, minimal or tuned, not {loop!r}")
    run.model, run.loader = model, loader
    return run


def compare_training(setups: dict, dataset, device, repeat=5, warmup=1) -> dict:
    """Images/s of one training epoch for each setup, measured :func:`interleaved`.

    setups: ``{name: keyword arguments of epoch_runner}``. Returns
    ``{"images_per_s": {name: ...}, "timings": {name: Timing}}``.
    """
    runs = {name: epoch_runner(dataset, device, **kw) for name, kw in setups.items()}
    timings = interleaved(runs, device, repeat, warmup)
    images = len(dataset)
    return {"images_per_s": {name: images / t.median for name, t in timings.items()}, "timings": timings}


# ---------------------------------------------------------------------------
# Where an epoch's time goes.

PHASES = ("data", "copy", "compute")


def epoch_breakdown(model, loader, loss_fn, optimizer, device) -> dict:
    """Train one epoch and return the seconds spent in each phase: ``{"data", "copy", "compute"}``.

    data: getting each batch from the loader (for a DataLoader: reading,
    PIL, ToTensor, collating; for a ResidentLoader: indexing on the device).
    copy: the host-to-device copies of images and targets.
    compute: forward, loss, backward and the optimizer step.

    The device is synchronised between the phases on purpose, so that each
    phase's work is charged to it. This also removes the overlap a normal
    epoch gets (copies and queued kernels running while Python moves on), so
    the sum is a little more than a plain epoch takes.
    """
    device = torch.device(device)
    non_blocking = device.type == "cuda" and getattr(loader, "pin_memory", False)
    seconds = dict.fromkeys(PHASES, 0.0)
    model.train()
    synchronize(device)
    start = time.perf_counter()
    batches = iter(loader)
    while True:
        try:
            imgs, targets = next(batches)
        except StopIteration:
            break
        synchronize(device)
        t_data = time.perf_counter()
        imgs = imgs.to(device, non_blocking=non_blocking)
        targets = targets.to(device, non_blocking=non_blocking)
        synchronize(device)
        t_copy = time.perf_counter()
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        synchronize(device)
        t_compute = time.perf_counter()
        seconds["data"] += t_data - start
        seconds["copy"] += t_copy - t_data
        seconds["compute"] += t_compute - t_copy
        start = t_compute
    seconds["data"] += time.perf_counter() - start  # the loader's last, empty call
    return seconds
