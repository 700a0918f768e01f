"""Checks of every GPU path that the unit tests cannot make without a GPU. Run by tools/gpu_check.sh.

Usage: python tools/gpu_checks.py [--device cuda] [--workdir DIR]
Prints one PASS/FAIL/SKIP line per check; exit 1 if any failed. ``--device cpu`` is a dry run
of the same code (the checks that only mean something on CUDA say SKIP).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import traceback
import warnings

import torch
from torch import nn

import tudui
from tudui.checkpoint import load_checkpoint, save_checkpoint

FAILED = []


def report(name, ok, info=""):
    status = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    print(f"{status} {name}{': ' + info if info else ''}", flush=True)
    if ok is False:
        FAILED.append(name)


@contextlib.contextmanager
def counting_syncs(device):
    """A list that, after the block, holds the host syncs CUDA reported inside it (None off CUDA)."""
    found = []
    if device.type != "cuda":
        yield None
        return
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        torch.cuda.set_sync_debug_mode(0)
    found += [w for w in caught if "synchroniz" in str(w.message)]


def images(n):
    return tudui.cifar10(True, source="synthetic", limit=n)


def course_model(device, **optimizer_options):
    torch.manual_seed(0)
    model = tudui.Tudui().to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-2, **optimizer_options)


def syncs_per_step(device, make_loader):
    """Host syncs per training step of train_one_epoch (the difference between 6 and 2 batches)."""
    counts = []
    for batches in (2, 6):
        loader = make_loader(images(64 * batches))
        model, optimizer = course_model(device)
        tudui.train_one_epoch(model, loader, nn.CrossEntropyLoss(), optimizer, device, progress=False)  # warm-up
        with counting_syncs(device) as syncs:
            tudui.train_one_epoch(model, loader, nn.CrossEntropyLoss(), optimizer, device, progress=False)
        counts.append(None if syncs is None else len(syncs))
    return None if counts[0] is None else (counts[1] - counts[0]) / 4


def check_loader_syncs(device):
    loaders = {"DataLoader": lambda ds: tudui.loaders(ds, ds, 64, device, num_workers=2)[0],
               "ResidentLoader": lambda ds: tudui.ResidentLoader(ds, 64, device)}
    for name, make in loaders.items():
        per_step = syncs_per_step(device, make)
        report(f"train_one_epoch with a {name}: no host sync per step", None if per_step is None else per_step == 0,
               "needs CUDA to count" if per_step is None else f"{per_step:g} per step")


def amp_setups(device):
    """(label, autocast dtype, use a GradScaler) for each mixed precision the device runs."""
    if device.type != "cuda":
        return [("bf16 autocast", torch.bfloat16, False)]
    native_bf16 = torch.cuda.get_device_capability(device) >= (8, 0)
    return ([("bf16 autocast", torch.bfloat16, False)] if native_bf16 else []) + [
        ("fp16 autocast + GradScaler, fused SGD", torch.float16, True)]


def amp_step(model, optimizer, scaler, batch, dtype, device):
    imgs, targets = batch
    with torch.autocast(device.type, dtype=dtype):
        loss = nn.functional.cross_entropy(model(imgs), targets)
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def check_amp_and_channels_last(device):
    batches = list(tudui.ResidentLoader(images(64 * 4), 64, device, shuffle=False))
    for label, dtype, scaled in amp_setups(device):
        for channels_last in (False, True):
            fmt = torch.channels_last if channels_last else torch.contiguous_format
            model, optimizer = course_model(device, **({"fused": True} if scaled else {}))
            model.to(memory_format=fmt)
            scaler = torch.amp.GradScaler(device.type) if scaled else None
            data = [(x.contiguous(memory_format=fmt), y) for x, y in batches]
            before = model.model[0].weight.detach().clone()
            amp_step(model, optimizer, scaler, data[0], dtype, device)  # warm-up (the scaler's first step)
            with counting_syncs(device) as syncs:
                for batch in data[1:]:
                    amp_step(model, optimizer, scaler, batch, dtype, device)
            weight = model.model[0].weight
            trains = bool(torch.isfinite(weight).all()) and not torch.equal(before, weight)
            in_format = data[0][0].is_contiguous(memory_format=fmt)
            name = f"{label}{', channels_last' if channels_last else ''}"
            report(f"{name}: trains", trains and in_format)
            report(f"{name}: no host sync per step", None if syncs is None else not syncs,
                   "needs CUDA to count" if syncs is None else f"{len(syncs)} in {len(data) - 1} steps")


def check_resident_equals_totensor(device):
    dataset = images(512)
    loader = tudui.ResidentLoader(dataset, 512, device, shuffle=False)
    on_device, _ = next(iter(loader))
    reference = torch.stack([dataset[i][0] for i in range(len(dataset))])
    report(f"ResidentLoader batches on {device} equal ToTensor() bit for bit",
           on_device.device.type == device.type and torch.equal(on_device.cpu(), reference))


def momentum_buffers(optimizer):
    return [state["momentum_buffer"] for state in optimizer.state.values()]


def check_checkpoint_round_trip(device, folder):
    model, optimizer = course_model(device, momentum=0.9)
    imgs, targets = next(iter(tudui.ResidentLoader(images(64), 64, device)))
    nn.functional.cross_entropy(model(imgs), targets).backward()
    optimizer.step()
    path = save_checkpoint(os.path.join(folder, "round-trip.pth"), model, optimizer, epoch=1)
    expected = [b.cpu() for b in momentum_buffers(optimizer)]
    saved_on = device
    for hop, target in enumerate((torch.device("cpu"), device, torch.device("cpu"))):
        model, optimizer = course_model(target, momentum=0.9)
        load_checkpoint(path, model, optimizer, device=target)
        buffers = momentum_buffers(optimizer)
        kept = len(buffers) == len(expected) and all(
            b.device.type == target.type and torch.equal(b.cpu(), e) for b, e in zip(buffers, expected))
        report(f"checkpoint saved on {saved_on}, loaded on {target}: momentum buffers kept, on {target}", kept)
        path, saved_on = save_checkpoint(os.path.join(folder, f"hop{hop}.pth"), model, optimizer, epoch=1), target


def check_quick_mode_offline():
    """A learner's offline GPU machine, no TUDUI_* settings and no CIFAR-10 on disk: lessons stay quick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUDUI_")}
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run([sys.executable, "-c", "import tudui; print(tudui.quick_mode())"], cwd=empty,
                              env=env, capture_output=True, text=True, timeout=120)
    report("quick_mode() with no settings and no CIFAR-10 on disk", done.stdout.strip() == "True",
           done.stdout.strip() or done.stderr.strip()[-300:])


def run(name, command, expect_ok=True, must_show=""):
    """Run a command line; PASS when it exits as expected and prints ``must_show``. Returns its output."""
    env = {**os.environ, "TUDUI_DATA": "synthetic"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    ok = (done.returncode == 0) == expect_ok and must_show in output
    lines = [line.strip() for line in output.splitlines() if must_show in line and line.strip()]
    report(name, ok, f"exit {done.returncode}; {(lines or ['(no output)'])[-1][:160]}" if ok else
           f"exit {done.returncode}, expected {'0' if expect_ok else 'an error'}"
           f"{' and ' + repr(must_show) if must_show else ''}; output ends:\n{output[-1500:]}")
    return output


def check_cli(device, folder):
    tudui_cli = [sys.executable, "-m", "tudui"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    common = ["--data", "synthetic", "--limit", "2048", "--no-progress"]
    ck, ck_resident = os.path.join(folder, "cli.pth"), os.path.join(folder, "cli-resident.pth")
    run("cli doctor", tudui_cli + ["doctor"])
    run(f"cli train on {device}, DataLoader", tudui_cli + ["train", "--device", device, "--epochs", "1",
                                                          "--checkpoint", ck] + common)
    run(f"cli train on {device}, resident", tudui_cli + ["train", "--device", device, "--loader", "resident",
                                                        "--epochs", "1", "--checkpoint", ck_resident] + common)
    for epochs, where in ((2, device), (3, "cpu")):
        run(f"cli resume on {where}", tudui_cli + ["train", "--device", where, "--epochs", str(epochs), "--resume",
                                                  "--checkpoint", ck] + common,
            must_show=f"resuming after epoch {epochs - 1}")
    from PIL import Image
    png = os.path.join(folder, "red.png")
    Image.new("RGB", (40, 30), "red").save(png)
    run(f"cli predict on {device}", tudui_cli + ["predict", "--device", device, "--checkpoint", ck, png],
        must_show=f"{png}: ")
    run(f"torchrun, one rank on {device}", torchrun + ["--nproc-per-node=1", "-m", "tudui", "train", "--device",
                                                      device, "--epochs", "1", "--checkpoint",
                                                      os.path.join(folder, "ddp.pth")] + common)
    ranks = str(torch.cuda.device_count() + 1)
    run(f"torchrun, {ranks} ranks on {torch.cuda.device_count()} GPU(s), refused in one line",
        torchrun + [f"--nproc-per-node={ranks}", "-m", "tudui", "train", "--device", "cuda", "--epochs", "1",
                    "--checkpoint", os.path.join(folder, "refused.pth")] + common,
        expect_ok=False, must_show="tudui: error:")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_checks: error: no CUDA GPU here; use --device cpu for a dry run", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        checks = [lambda: check_loader_syncs(device), lambda: check_amp_and_channels_last(device),
                  lambda: check_resident_equals_totensor(device),
                  lambda: check_checkpoint_round_trip(device, folder), check_quick_mode_offline,
                  lambda: check_cli(args.device, folder)]
        for check in checks:
            try:
                check()
            except Exception as exc:  # noqa: BLE001 - one broken path must not hide the others
                traceback.print_exc()
                report("(a check stopped early)", False, f"{type(exc).__name__}: {exc}")
    print(f"gpu_checks on {device}: {len(FAILED)} failed{': ' + '; '.join(FAILED) if FAILED else ''}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
