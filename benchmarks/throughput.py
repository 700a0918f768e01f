"""Training throughput of the Tudui network: where the images/s go, on this machine.

    python benchmarks/throughput.py [--device auto|cpu|cuda|cuda:N|mps|xpu] [--quick] [--json PATH]

Measures, as images/s of one training epoch (median of timed epochs after a
warm-up, runs interleaved so that machine drift falls on all of them alike):
  1. the course's minimal loop vs tudui.train_one_epoch, same pre-built batches;
  2. the DataLoader path (PIL + ToTensor) vs the device-resident path (ResidentLoader);
  3. on an accelerator: batch 64 and 512, channels_last and autocast;
  4. FLOPs per image, and each figure as a share of the device's measured matmul limit.
The measuring code lives in tudui.timing, so notebook 07 uses the very same functions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

import tudui
from tudui import timing

HERE = Path(__file__).resolve().parent
EXIT_USAGE = 2

# Sizes: images per timed epoch, timed repeats, matmul size. CPU figures suit a 2-core machine.
SIZES = {
    ("cpu", True): dict(loop_images=192, loop_repeat=9, images=256, repeat=3, matmul=1024),
    ("cpu", False): dict(loop_images=512, loop_repeat=15, images=1024, repeat=7, matmul=1024),
    ("accelerator", True): dict(loop_images=10_000, loop_repeat=5, images=10_000, repeat=3, matmul=4096),
    ("accelerator", False): dict(loop_images=50_000, loop_repeat=7, images=50_000, repeat=5, matmul=4096),
}
LOOP_TARGET = 0.95


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    p = Parser(prog="throughput.py", description="Measure Tudui training images/s on one device.")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps, xpu (default: auto)")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test (under a minute on a CPU)")
    p.add_argument("--json", default=None, help="where to write the results "
                   "(default: benchmarks/results/throughput-<device>.json)")
    p.add_argument("--data", choices=tudui.data.SOURCES, default=None,
                   help="auto, cifar10 or synthetic (default: $TUDUI_DATA or auto)")
    p.add_argument("--root", default="data", help="folder holding CIFAR-10 (default: data)")
    return p.parse_args(argv)


def _name(device: torch.device) -> str:
    return device.type if device.index in (None, 0) else f"{device.type}{device.index}"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"CPU, {torch.get_num_threads()} threads"
    return device.type


def run(device: torch.device, quick: bool, data_source=None, root="data") -> dict:
    """Measure everything on ``device``; returns the results (rows, ratios, limits)."""
    accelerator = device.type != "cpu"
    size = SIZES[("accelerator" if accelerator else "cpu", quick)]
    train_set = tudui.cifar10(True, root, data_source, limit=size["images"])
    found = "synthetic" if tudui.is_synthetic(train_set) else "cifar10"  # say "not found" once only
    loop_set = tudui.cifar10(True, root, found, limit=size["loop_images"])
    dtypes = [torch.float32] + ([timing.autocast_dtype(device)] if accelerator else [])
    limits = {str(dt).replace("torch.", ""): timing.matmul_flops_per_s(device, dt, n=size["matmul"])
              for dt in dtypes}
    forward = timing.forward_flops(tudui.Tudui())
    results = {"device": str(device), "device_name": _device_name(device), "torch": torch.__version__,
               "data": "synthetic" if tudui.is_synthetic(train_set) else "CIFAR-10", "quick": quick,
               "images": len(train_set), "loop_images": len(loop_set), "repeat": size["repeat"],
               "loop_repeat": size["loop_repeat"], "warmup": 1,
               "forward_flops_per_image": forward, "train_flops_per_image": 3 * forward,
               "matmul_flops_per_s": limits, "matmul_size": size["matmul"], "rows": [], "ratios": []}

    def add_rows(group, batch, precision=None):
        for name, ips in group["images_per_s"].items():
            dtype = precision(name) if precision else "float32"
            achieved = ips * 3 * forward
            results["rows"].append({"path": name, "batch": batch, "images_per_s": ips, "dtype": dtype,
                                    "fraction_of_matmul": achieved / limits[dtype]})

    def add_ratio(label, group, fast, slow, target=None):
        value = timing.speed_ratio(group["timings"][fast], group["timings"][slow])
        results["ratios"].append({"label": label, "value": value, "target": target})

    # 1. Loop overhead: the same pre-built batches, so no data loading in the way.
    loops = timing.compare_training({
        "minimal loop (pre-built batches)": dict(kind="batches", loop="minimal"),
        "tudui.train_one_epoch (same batches)": dict(kind="batches", loop="tudui"),
    }, loop_set, device, repeat=size["loop_repeat"])
    add_rows(loops, 64)
    add_ratio("tudui.train_one_epoch / minimal loop", loops, "tudui.train_one_epoch (same batches)",
              "minimal loop (pre-built batches)", LOOP_TARGET)

    # 2 and 3. Data paths, end to end; on an accelerator also batch 512, channels_last, autocast.
    amp = timing.autocast_dtype(device)
    amp_name = str(amp).replace("torch.", "")
    short = {torch.bfloat16: "bf16", torch.float16: "fp16"}[amp]
    for batch in ((64, 512) if accelerator else (64,)):
        setups = {"DataLoader (PIL + ToTensor)": dict(kind="dataloader"),
                  "ResidentLoader": dict(kind="resident")}
        if accelerator:
            setups.update({
                "resident + channels_last": dict(kind="resident", loop="tuned", channels_last=True),
                f"resident + autocast {short}": dict(kind="resident", loop="tuned", amp_dtype=amp),
                f"resident + channels_last + {short}": dict(kind="resident", loop="tuned",
                                                            channels_last=True, amp_dtype=amp),
            })
        for kw in setups.values():
            kw["batch_size"] = batch
        group = timing.compare_training(setups, train_set, device, repeat=size["repeat"])
        add_rows(group, batch, lambda name: amp_name if short in name else "float32")
        add_ratio(f"ResidentLoader / DataLoader (batch {batch})", group, "ResidentLoader",
                  "DataLoader (PIL + ToTensor)")
        if accelerator:
            for name in list(setups)[2:]:
                add_ratio(f"{name} / ResidentLoader (batch {batch})", group, name, "ResidentLoader")
    return results


def report(results: dict) -> str:
    """The results as an aligned plain-text table."""
    limits = results["matmul_flops_per_s"]
    n = results["matmul_size"]
    lines = [
        "Tudui training throughput: images/s of one training epoch, the median of repeated timed epochs "
        "after a warm-up, runs interleaved",
        f"device: {results['device']} ({results['device_name']}) | torch {results['torch']} | "
        f"data: {results['data']}, {results['images']:,} images{' | --quick' if results['quick'] else ''}",
        f"model: {results['forward_flops_per_image'] / 1e6:.2f} MFLOP forward per image, "
        f"{results['train_flops_per_image'] / 1e6:.2f} MFLOP to train on one (3x forward)",
        "matmul limit (measured, {0}x{0}): ".format(n)
        + ", ".join(f"{dt} {v / 1e9:,.1f} GFLOP/s" for dt, v in limits.items()),
        "",
    ]
    width = max(len(r["path"]) for r in results["rows"])
    lines.append(f"{'path':<{width}}  {'batch':>5}  {'images/s':>10}  {'% of matmul limit':>18}")
    lines.append("-" * (width + 41))
    for r in results["rows"]:
        share = f"{100 * r['fraction_of_matmul']:.2f}% {r['dtype']}"
        lines.append(f"{r['path']:<{width}}  {r['batch']:>5}  {r['images_per_s']:>10,.0f}  {share:>18}")
    lines.append("")
    label_width = max(len(r["label"]) for r in results["ratios"])
    for r in results["ratios"]:
        target = f"  (target >= {r['target']:.2f})" if r["target"] else ""
        lines.append(f"ratio {r['label']:<{label_width}} : {r['value']:5.2f}{target}")
    if results["device"] == "cpu":
        lines.append("accelerator rows (batch 512, channels_last, autocast): skipped, no accelerator in this run")
    return "\n".join(lines)


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        device = tudui.pick_device(args.device)
    except (UsageError, tudui.DeviceError) as exc:
        print(f"throughput.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    path = Path(args.json) if args.json else HERE / "results" / f"throughput-{_name(device)}.json"
    try:
        results = run(device, args.quick, args.data, args.root)
    except tudui.DataError as exc:
        print(f"throughput.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(report(results))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
    except OSError as exc:
        print(f"throughput.py: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"results written to {args.json or os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
