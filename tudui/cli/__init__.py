"""``python -m tudui doctor | train | predict``."""
from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import sys
import traceback

import torch

from .. import checkpoint, data, device, distributed, loops, resident
from ..model import Tudui

EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130
ISSUES = "https://github.com/tudui-lab/pytorch-cpu-gpu/issues"
# Settings a resumed run must share with the run that wrote the checkpoint.
RESUMED_SETTINGS = ("lr", "batch_size", "data", "limit", "seed", "loader")


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


KNOWN_ERRORS = (UsageError, device.DeviceError, data.DataError, checkpoint.CheckpointError,
                distributed.LaunchError)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _number(kind, low, high):
    """An argparse type: a finite ``kind`` in [low, high]."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a {'whole ' if kind is int else ''}number") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text[:40]}")
        return value
    return parse


def build_parser():
    p = Parser(prog="python -m tudui", description="Train the course's Tudui CIFAR-10 network on any device.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    sub.add_parser("doctor", help="report devices and measure training speed on each")

    t = sub.add_parser("train", help="train Tudui, saving a checkpoint each epoch")
    t.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps, xpu (default: auto)")
    t.add_argument("--epochs", type=_number(int, 1, 10_000), default=10)
    t.add_argument("--batch-size", type=_number(int, 1, 65_536), default=64)
    t.add_argument("--lr", type=_number(float, 1e-12, 1e3), default=1e-2)
    t.add_argument("--data", choices=data.SOURCES, default=None,
                   help="auto, cifar10 or synthetic (default: $TUDUI_DATA or auto)")
    t.add_argument("--root", default="data", help="folder holding CIFAR-10 (default: data)")
    t.add_argument("--limit", type=_number(int, 1, 50_000), default=None,
                   help="train on the first N images only (CIFAR-10 has 50,000)")
    t.add_argument("--loader", choices=("dataloader", "resident"), default="dataloader",
                   help="dataloader (the course's) or resident (whole dataset on the device)")
    t.add_argument("--checkpoint", default="tudui.pth", help="where to save (default: tudui.pth)")
    t.add_argument("--resume", action="store_true", help="continue from --checkpoint on the chosen device")
    t.add_argument("--force", action="store_true", help="overwrite an existing --checkpoint (without --resume)")
    t.add_argument("--seed", type=_number(int, 0, 2**63 - 1), default=0)
    t.add_argument("--no-progress", action="store_true", help="no progress bars")

    r = sub.add_parser("predict", help="classify images with a trained checkpoint")
    r.add_argument("--checkpoint", required=True, help="our checkpoint, a state_dict or the course's tudui_N.pth")
    r.add_argument("--device", default="auto")
    r.add_argument("images", nargs="+", help="image files (any size; resized to 32x32)")
    return p


def diagnose(args):
    from . import doctor as diagnosis
    diagnosis.run()


def _check_checkpoint_path(args):
    """Before any training: the checkpoint can be written, and is resumed or overwritten only on request."""
    checkpoint.check_target(args.checkpoint)
    exists = os.path.isfile(args.checkpoint)
    if args.resume and not exists:
        raise UsageError(f"--resume: no checkpoint at {args.checkpoint!r}; train without --resume first")
    if exists and not args.resume and not args.force:
        raise UsageError(f"{args.checkpoint!r} already exists; continue it with --resume, "
                         "overwrite it with --force, or choose another --checkpoint")


def _settings(args, train_set) -> dict:
    """The run's settings as recorded in its checkpoint (the data source as actually used)."""
    used = "synthetic" if data.is_synthetic(train_set) else "cifar10"
    return {**vars(args), "data": used}


def _resume(args, model, optimizer, dev, settings) -> int:
    """Load the checkpoint; refuse it if it was trained with other settings. Returns its epoch."""
    info = checkpoint.load_checkpoint(args.checkpoint, model, optimizer, dev, restore_rng=True)
    recorded = info["extra"].get("args") if isinstance(info["extra"].get("args"), dict) else {}
    recorded = {**recorded, "lr": optimizer.param_groups[0]["lr"]}  # the lr the optimizer state really has
    changed = [f"--{k.replace('_', '-')} {recorded[k]} (not {settings[k]})"
               for k in RESUMED_SETTINGS if k in recorded and recorded[k] != settings[k]]
    if changed:
        raise UsageError(f"--resume: {args.checkpoint!r} was trained with {', '.join(changed)}; resume with the "
                         "same settings, or start a new run with --force")
    return info["epoch"] or 0


def _announce(log, ctx, args, train_set, start):
    procs = f", {ctx.world_size} processes ({ctx.backend})" if ctx.distributed else ""
    log(f"device: {ctx.device}{procs}; data: {data.describe_data(train_set)}; loader: {args.loader}")
    if start:
        log(f"resuming after epoch {start} from {args.checkpoint}")
    if start >= args.epochs:
        log(f"already trained for {start} epochs; nothing to do (raise --epochs)")


def _run_training(args, ctx):
    torch.manual_seed(args.seed)
    with distributed.main_first(ctx):  # under torchrun, only rank 0 downloads CIFAR-10
        train_set = data.cifar10(True, args.root, args.data, args.limit, seed=args.seed)
        test_set = data.cifar10(False, args.root, args.data, args.limit and max(args.limit // 5, 1), seed=args.seed)
    model = Tudui().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    settings = _settings(args, train_set)
    start = _resume(args, model, optimizer, ctx.device, settings) if args.resume else 0
    if ctx.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    make = resident.resident_loaders if args.loader == "resident" else data.loaders
    train_loader, test_loader = make(train_set, test_set, args.batch_size, ctx.device,
                                     distributed=ctx.distributed, seed=args.seed)
    log = print if ctx.is_main else None
    if log:
        _announce(log, ctx, args, train_set, start)

    def save(epoch, history):
        if ctx.is_main:  # one writer
            checkpoint.save_checkpoint(args.checkpoint, model, optimizer, epoch, args=settings)

    loops.fit(model, train_loader, test_loader, torch.nn.CrossEntropyLoss(), optimizer, ctx.device,
              args.epochs, start_epoch=start, on_epoch_end=save,
              progress=ctx.is_main and not args.no_progress, log=log)
    if log and start < args.epochs:
        log(f"saved {args.checkpoint}")


def train(args):
    _check_checkpoint_path(args)
    ctx = distributed.setup(args.device)
    try:
        with checkpoint.exclusive(args.checkpoint) if ctx.is_main else contextlib.nullcontext():
            _run_training(args, ctx)
    finally:
        gc.collect()  # the DDP model (and the save closure holding it) must go before its process group
        distributed.teardown()


def _open_image(path):
    """``path`` as an 8-bit RGB image; a UsageError saying why not."""
    import warnings

    import numpy as np
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
            image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UsageError(f"{path!r}: refused: more than {Image.MAX_IMAGE_PIXELS:,} pixels "
                         "(a decompression bomb?)") from None
    except (OSError, ValueError, SyntaxError) as exc:  # missing, a folder, not an image, truncated ...
        reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"{path!r}: cannot read image: {reason[:120]}") from None
    if image.mode.startswith("I"):  # 16- or 32-bit grey: scale to 8 bits instead of saturating
        image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8))
    return image.convert("RGB")


def predict(args):
    from torchvision import transforms

    dev = device.pick_device(args.device)
    model = checkpoint.load_model(args.checkpoint, dev)
    to_input = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    for path in args.images:
        image = _open_image(path)
        with torch.no_grad():
            probs = model(to_input(image).unsqueeze(0).to(dev)).softmax(1)[0].cpu()
        k = int(probs.argmax())
        print(f"{path}: {data.CLASSES[k]} ({probs[k]:.1%})")


def _one_line(exc, limit=300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def main(argv=None) -> int:
    """Run one command; every failure ends in one line on stderr and an exit code (2 usage, 1 bug, 130 Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
        {"doctor": diagnose, "train": train, "predict": predict}[args.command](args)
    except KNOWN_ERRORS as exc:
        print(f"tudui: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        doctor = list(sys.argv[1:] if argv is None else argv)[:1] == ["doctor"]  # it saves nothing
        print("tudui: interrupted" + ("" if doctor else " (the last saved checkpoint is intact)"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("TUDUI_DEBUG") == "1":
            traceback.print_exc()
        print(f"tudui: internal error ({type(exc).__name__}: {_one_line(exc, 160)}); this is a bug, please "
              f"report it at {ISSUES} (TUDUI_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_BUG
    return 0
