"""What one image costs (FLOPs counted by torch) and what the device can do (a big matmul)."""
from __future__ import annotations

import logging
from contextlib import contextmanager

import torch
from torch.utils.flop_counter import FlopCounterMode

import tudui


def flops_per_image(train=False) -> float:
    """FLOPs of the Tudui network for one image, counted by ``FlopCounterMode`` (convolutions and
    matmuls; pooling, biases and the loss are not counted). train=True: forward and backward."""
    model = tudui.Tudui()
    images, targets = torch.zeros(2, 3, 32, 32), torch.zeros(2, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        loss = torch.nn.functional.cross_entropy(model(images), targets)
        if train:
            loss.backward()
    return counter.get_total_flops() / len(images)


def tf32_like_convolutions(device) -> bool | None:
    """Whether fp32 convolutions on ``device`` may use TF32 (None: not a CUDA device).

    cuDNN convolutions use TF32 by default (``torch.backends.cudnn.allow_tf32``), matmuls do not
    (``torch.backends.cuda.matmul.allow_tf32``): the fp32 limit is measured with the convolutions' setting.
    """
    return torch.backends.cudnn.allow_tf32 if torch.device(device).type == "cuda" else None


@contextmanager
def matmul_tf32(allowed):
    """Let CUDA fp32 matmuls use TF32 or not, for the duration of the block (None: leave as is)."""
    before = torch.backends.cuda.matmul.allow_tf32
    if allowed is not None:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def matmul_flops_per_s(device, dtype=torch.float32, n=1024, min_run_time=1.0) -> float:
    """Measured FLOP/s of an n x n matmul on ``device`` (its fastest run): a practical limit for its arithmetic.

    fp32 on CUDA runs with the TF32 setting of the convolutions (see :func:`tf32_like_convolutions`).
    ``torch.utils.benchmark.Timer`` warms up, synchronises the accelerator and repeats until
    ``min_run_time`` seconds; it uses one CPU thread unless told, so it is told.
    """
    # torch.utils.benchmark imports cpp_extension, which warns on a CUDA build of torch without a GPU
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark

    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    timer = benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b}, num_threads=torch.get_num_threads())
    with matmul_tf32(tf32_like_convolutions(device) if dtype == torch.float32 else None):
        seconds = min(timer.blocked_autorange(min_run_time=min_run_time).times)
    return 2 * n ** 3 / seconds  # from the fastest run: other programs can only slow a run down
