"""``python -m tudui doctor | train | predict``."""
from __future__ import annotations

import argparse
import os
import sys

import torch

from . import checkpoint, data, device, distributed, loops, resident, timing
from .model import Tudui

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def build_parser():
    p = Parser(prog="python -m tudui", description="Train the course's Tudui CIFAR-10 network on any device.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    sub.add_parser("doctor", help="report devices and measure training speed on each")

    t = sub.add_parser("train", help="train Tudui, saving a checkpoint each epoch")
    t.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps, xpu (default: auto)")
    t.add_argument("--epochs", type=_positive(int), default=10)
    t.add_argument("--batch-size", type=_positive(int), default=64)
    t.add_argument("--lr", type=_positive(float), default=1e-2)
    t.add_argument("--data", choices=data.SOURCES, default=None,
                   help="auto, cifar10 or synthetic (default: $TUDUI_DATA or auto)")
    t.add_argument("--root", default="data", help="folder holding CIFAR-10 (default: data)")
    t.add_argument("--limit", type=_positive(int), default=None, help="train on the first N images only")
    t.add_argument("--loader", choices=("dataloader", "resident"), default="dataloader",
                   help="dataloader (the course's) or resident (whole dataset on the device)")
    t.add_argument("--checkpoint", default="tudui.pth", help="where to save (default: tudui.pth)")
    t.add_argument("--resume", action="store_true", help="continue from --checkpoint on the chosen device")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-progress", action="store_true", help="no progress bars")

    r = sub.add_parser("predict", help="classify images with a trained checkpoint")
    r.add_argument("--checkpoint", required=True, help="our checkpoint, a state_dict or the course's tudui_N.pth")
    r.add_argument("--device", default="auto")
    r.add_argument("images", nargs="+", help="image files (any size; resized to 32x32)")
    return p


def doctor(args):
    print(device.describe_devices())
    print()
    targets = [torch.device("cpu")]
    acc = device.best_accelerator()
    if acc is not None:
        targets.append(acc)
    speeds = {}
    for dev in targets:
        speeds[dev] = timing.train_step_speed(Tudui(), dev)
        print(f"training speed on {dev}: {speeds[dev]:,.0f} images/s (batch 64)")
    if acc is not None:
        print(f"{acc} trains {speeds[acc] / speeds[targets[0]]:.1f}x as fast as the CPU here; "
              f"use --device auto or --device {acc}")
    else:
        print("No GPU is used. Check: a CUDA build of torch (`torch.version.cuda` is not None), "
              "`nvidia-smi` lists your GPU, and on Colab: Runtime > Change runtime type > GPU.")


def train(args):
    if args.resume and not os.path.isfile(args.checkpoint):
        raise UsageError(f"--resume: no checkpoint at {args.checkpoint!r}; train without --resume first")
    ctx = distributed.setup(args.device)
    try:
        torch.manual_seed(args.seed)
        with distributed.main_first(ctx):  # under torchrun, only rank 0 downloads CIFAR-10
            train_set = data.cifar10(True, args.root, args.data, args.limit, seed=args.seed)
            test_set = data.cifar10(False, args.root, args.data, args.limit and max(args.limit // 5, 1),
                                    seed=args.seed)
        model = Tudui().to(ctx.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        start = 0
        if args.resume:
            start = checkpoint.load_checkpoint(args.checkpoint, model, optimizer, ctx.device,
                                               restore_rng=True)["epoch"] or 0
        if ctx.distributed:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
        make = resident.resident_loaders if args.loader == "resident" else data.loaders
        train_loader, test_loader = make(train_set, test_set, args.batch_size, ctx.device,
                                         distributed=ctx.distributed, seed=args.seed)
        log = print if ctx.is_main else None
        if log:
            procs = f", {ctx.world_size} processes ({ctx.backend})" if ctx.distributed else ""
            log(f"device: {ctx.device}{procs}; data: {data.describe_data(train_set)}; loader: {args.loader}")
            if start:
                log(f"resuming after epoch {start} from {args.checkpoint}")
            if start >= args.epochs:
                log(f"already trained for {start} epochs; nothing to do (raise --epochs)")

        def save(epoch, history):
            if ctx.is_main:  # one writer
                checkpoint.save_checkpoint(args.checkpoint, model, optimizer, epoch, args=vars(args))

        loops.fit(model, train_loader, test_loader, torch.nn.CrossEntropyLoss(), optimizer, ctx.device,
                  args.epochs, start_epoch=start, on_epoch_end=save,
                  progress=ctx.is_main and not args.no_progress, log=log)
        if log and start < args.epochs:
            log(f"saved {args.checkpoint}")
    finally:
        distributed.teardown()


def predict(args):
    from PIL import Image, UnidentifiedImageError
    from torchvision import transforms

    dev = device.pick_device(args.device)
    model = checkpoint.load_model(args.checkpoint, dev)
    to_input = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    for path in args.images:
        try:
            image = Image.open(path).convert("RGB")
        except (OSError, UnidentifiedImageError) as exc:
            raise UsageError(f"{path}: cannot read image ({exc.__class__.__name__})") from None
        with torch.no_grad():
            probs = model(to_input(image).unsqueeze(0).to(dev)).softmax(1)[0].cpu()
        k = int(probs.argmax())
        print(f"{path}: {data.CLASSES[k]} ({probs[k]:.1%})")


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        {"doctor": doctor, "train": train, "predict": predict}[args.command](args)
    except (UsageError, device.DeviceError, data.DataError, checkpoint.CheckpointError) as exc:
        print(f"tudui: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tudui: interrupted (the last saved checkpoint is intact)", file=sys.stderr)
        return 130
    return 0
