"""The tool: ``python -m tudui doctor | train | predict``, with one error boundary (:func:`main`).
Only ``python -m tudui`` and the ``tudui`` script import this package; ``import tudui`` does not.
"""
import argparse
import math
import os
import re
import sys
import traceback

from .. import checkpoint, data, device, distributed
from .console import console
from .prediction import predict
from .training import UsageError, train

EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130
ISSUES = "https://github.com/tudui-lab/pytorch-cpu-gpu/issues"
KNOWN_ERRORS = (UsageError, device.DeviceError, data.DataError, checkpoint.CheckpointError,
                distributed.LaunchError)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "-inf", "-1e-3" and "-nan" are values (refused by range), not options
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf(inity)?|nan)$", re.I)

    def error(self, message):
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _number(kind, low, high):
    """An argparse type: a finite ``kind`` in [low, high]."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            whole = "whole " if kind is int else ""
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a {whole}number") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text[:40]}")
        return value
    return parse


def build_parser():
    p = Parser(prog="python -m tudui", description="Train the course's Tudui CIFAR-10 network on any device.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    d = sub.add_parser("doctor", help="report devices and measure training speed on each")
    d.add_argument("--lang", choices=("en", "zh"), default="en", help="the language it prints in (default: en)")
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
    diagnosis.run(lang=args.lang)


def _one_line(exc, limit=300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def main(argv=None) -> int:
    """Run one command; every failure ends in one line on stderr and an exit code (2 usage, 1 bug,
    130 Ctrl-C or SIGTERM)."""
    args = None
    with console():
        try:
            args = build_parser().parse_args(argv)
            {"doctor": diagnose, "train": train, "predict": predict}[args.command](args)
        except KNOWN_ERRORS as exc:
            print(f"tudui: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:  # a checkpoint there now was saved by this run or was there before: it is whole
            kept = getattr(args, "command", None) == "train" and os.path.isfile(args.checkpoint)
            print("tudui: interrupted" + (" (the last saved checkpoint is intact)" if kept else ""), file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:
            if os.environ.get("TUDUI_DEBUG") == "1":
                traceback.print_exc()
            print(f"tudui: internal error ({type(exc).__name__}: {_one_line(exc, 160)}); this is a bug, "
                  f"please report it at {ISSUES} (TUDUI_DEBUG=1 shows the traceback)", file=sys.stderr)
            return EXIT_BUG
    return 0
