"""Training throughput of the Tudui network: where the images/s go, on this machine.

    python benchmarks/throughput.py [--device auto|cpu|cuda|cuda:N|mps|xpu] [--quick] [--json PATH]

Measures, as images/s of one training epoch (median of timed epochs after a warm-up, runs
interleaved so that machine drift falls on all of them alike):
  1. the course's minimal loop vs tudui.train_one_epoch, same pre-built batches;
  2. the DataLoader path (PIL + ToTensor) vs the device-resident path (ResidentLoader), both
     through tudui.train_one_epoch;
  3. on an accelerator, batch 64 and 512: the minimal loop over resident data, plain and with
     channels_last, autocast, both (each against the plain minimal loop);
  4. FLOPs per image, and each figure as a share of the device's measured matmul limit.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

import harness
import limits
import tudui
from tudui.timing import interleaved, speed_ratio

HERE = Path(__file__).resolve().parent
EXIT_USAGE = 2

# Sizes: images per timed epoch, timed repeats, matmul size. CPU figures suit a 2-core machine.
SIZES = {
    ("cpu", True): dict(loop_images=192, loop_repeat=9, images=256, repeat=3, matmul=1024, matmul_s=0.2),
    ("cpu", False): dict(loop_images=512, loop_repeat=15, images=1024, repeat=7, matmul=1024, matmul_s=1.0),
    ("accelerator", True): dict(loop_images=10_000, loop_repeat=5, images=10_000, repeat=3, matmul=4096,
                                matmul_s=0.2),
    ("accelerator", False): dict(loop_images=50_000, loop_repeat=7, images=50_000, repeat=5, matmul=4096,
                                 matmul_s=1.0),
}
LOOP_TARGET = 0.95
SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}  # None: autocast does not pay there


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
    p.add_argument("--data", default=None, help="auto, cifar10 or synthetic (default: $TUDUI_DATA or auto)")
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


def loop_runs(batches, device) -> dict:
    """Section 1: the same pre-built batches through the minimal loop and through tudui.train_one_epoch."""
    return {"minimal loop (pre-built batches)": harness.minimal_run(batches, harness.training_step(device), device),
            "tudui.train_one_epoch (same batches)": harness.tudui_run(batches, device)}


def loader_runs(dataset, batch, device) -> dict:
    """Section 2: the course's DataLoader vs the ResidentLoader, both through tudui.train_one_epoch."""
    return {"DataLoader (PIL + ToTensor)": harness.tudui_run(tudui.loaders(dataset, dataset, batch, device)[0],
                                                             device),
            "ResidentLoader": harness.tudui_run(tudui.ResidentLoader(dataset, batch, device), device)}


def option_runs(dataset, batch, device, amp_dtype) -> dict:
    """Section 3: the minimal loop over resident data with fused SGD, plain and with each option."""
    short = SHORT[amp_dtype]
    names = {(False, None): "resident, minimal loop", (True, None): "resident + channels_last",
             (False, amp_dtype): f"resident + autocast {short}", (True, amp_dtype): f"resident + channels_last + {short}"}
    runs = {}
    for (channels_last, amp), name in names.items():
        loader = harness.resident_loader(dataset, batch, device, channels_last)
        step = harness.training_step(device, channels_last, amp, fused=True)
        runs[name] = harness.minimal_run(loader, step, device)
    return runs


def add_rows(results, runs, timings, images, batch):
    """One table row per run: images/s, and the arithmetic it achieves as a share of the matmul limit."""
    for name, t in timings.items():
        ips, dtype = images / statistics.median(t), runs[name].dtype
        results["rows"].append({"path": name, "batch": batch, "images_per_s": ips, "dtype": dtype,
                                "fraction_of_matmul": ips * results["train_flops_per_image"]
                                / results["matmul_flops_per_s"][dtype]})


def add_ratio(results, label, timings, fast, slow, target=None):
    value = speed_ratio(timings[fast], timings[slow])
    results["ratios"].append({"label": label, "value": value, "target": target})


def header(device, size, quick, train_set, loop_set, dtypes) -> dict:
    """The results before any epoch is timed: what runs where, FLOPs per image, matmul limits."""
    limit = {str(dt).replace("torch.", ""): limits.matmul_flops_per_s(device, dt, size["matmul"], size["matmul_s"])
             for dt in dtypes}
    return {"device": str(device), "device_name": _device_name(device), "torch": torch.__version__,
            "data": "synthetic" if tudui.is_synthetic(train_set) else "CIFAR-10", "quick": quick,
            "images": len(train_set), "loop_images": len(loop_set), "repeat": size["repeat"],
            "loop_repeat": size["loop_repeat"], "warmup": 1,
            "forward_flops_per_image": limits.flops_per_image(), "train_flops_per_image": limits.flops_per_image(True),
            "matmul_flops_per_s": limit, "matmul_size": size["matmul"],
            "matmul_tf32": limits.tf32_like_convolutions(device), "rows": [], "ratios": []}


def run(device: torch.device, quick: bool, data_source=None, root="data") -> dict:
    """Measure everything on ``device``; returns the results (rows, ratios, limits)."""
    accelerator = device.type != "cpu"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # Timer synchronises the current device
    size = SIZES[("accelerator" if accelerator else "cpu", quick)]
    train_set = tudui.cifar10(True, root, data_source, limit=size["images"])
    found = "synthetic" if tudui.is_synthetic(train_set) else "cifar10"  # say "not found" once only
    loop_set = tudui.cifar10(True, root, found, limit=size["loop_images"])
    amp = harness.autocast_dtype(device)
    results = header(device, size, quick, train_set, loop_set, [torch.float32] + [amp] * (accelerator and amp is not None))

    batches = list(tudui.ResidentLoader(loop_set, 64, device, shuffle=False))
    runs = loop_runs(batches, device)
    timings = interleaved(runs, device, size["loop_repeat"])
    add_rows(results, runs, timings, len(loop_set), 64)
    add_ratio(results, "tudui.train_one_epoch / minimal loop", timings, "tudui.train_one_epoch (same batches)",
              "minimal loop (pre-built batches)", LOOP_TARGET)

    for batch in ((64, 512) if accelerator else (64,)):
        options = option_runs(train_set, batch, device, amp) if accelerator else {}
        runs = {**loader_runs(train_set, batch, device), **options}
        timings = interleaved(runs, device, size["repeat"])
        add_rows(results, runs, timings, len(train_set), batch)
        add_ratio(results, f"ResidentLoader / DataLoader (batch {batch})", timings, "ResidentLoader",
                  "DataLoader (PIL + ToTensor)")
        baseline, *tuned = options or [None]
        for name in tuned:  # same loop, same optimizer on both sides: only the option differs
            add_ratio(results, f"{name} / {baseline} (batch {batch})", timings, name, baseline)
    return results


def report(results: dict) -> str:
    """The results as an aligned plain-text table."""
    tf32 = {True: "; float32 with TF32 on, as the convolutions", False: "; float32 with TF32 off, as the convolutions",
            None: ""}[results["matmul_tf32"]]
    lines = [
        "Tudui training throughput: images/s of one training epoch, the median of repeated timed epochs "
        "after a warm-up, runs interleaved",
        f"device: {results['device']} ({results['device_name']}) | torch {results['torch']} | "
        f"data: {results['data']}, {results['images']:,} images{' | --quick' if results['quick'] else ''}",
        f"model: {results['forward_flops_per_image'] / 1e6:.2f} MFLOP forward per image, "
        f"{results['train_flops_per_image'] / 1e6:.2f} MFLOP to train on one (forward + backward, "
        "counted by torch.utils.flop_counter)",
        f"matmul limit (fastest measured run, {results['matmul_size']}x{results['matmul_size']}{tf32}): "
        + ", ".join(f"{dt} {v / 1e9:,.1f} GFLOP/s" for dt, v in results["matmul_flops_per_s"].items()),
        "",
    ]
    width = max(len(r["path"]) for r in results["rows"])
    lines.append(f"{'path':<{width}}  {'batch':>5}  {'images/s':>10}  {'% of matmul limit':>18}")
    lines.append("-" * (width + 41))
    for r in results["rows"]:
        share = f"{100 * r['fraction_of_matmul']:.2f}% {r['dtype']}"
        lines.append(f"{r['path']:<{width}}  {r['batch']:>5}  {r['images_per_s']:>10,.0f}  {share:>18}")
    lines.append("")
    lines.append("ratios: the median of round-by-round ratios (each round ran both paths back to back), so they can")
    lines.append("differ from the ratio of two medians above when the machine is busy")
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
