"""Checks of every GPU path that the unit tests cannot make without a GPU. Run by tools/gpu_check.sh.

Usage: python tools/gpu_checks.py [--device cuda]
Prints one PASS/FAIL/SKIP line per check; exit 1 if any failed, 2 if the device is not there.
``--device cpu`` is a dry run of the same code (the checks that only mean something on CUDA say SKIP).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import tudui
from tudui import distributed
from tudui.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # as throughput.py imports it
import harness  # noqa: E402

FAILED = []
STRICT = False  # True on CUDA: there a check that says SKIP checked nothing, and fails
COMMAND_SECONDS = 90  # each command line of check_cli; on an H200 they take 5-15 s


def report(name, ok, info=""):
    status = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    print(f"{status} {name}{': ' + info if info else ''}", flush=True)
    if ok is False or (ok is None and STRICT):
        FAILED.append(name)


@contextlib.contextmanager
def counting_syncs(device):
    """A list that, after the block, holds the host syncs CUDA reported inside it (None off CUDA)."""
    if device.type != "cuda":
        yield None
        return
    found = []
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("warn")  # each sync: a UserWarning "called a synchronizing CUDA operation"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        torch.cuda.set_sync_debug_mode("default")
    found += [w for w in caught if "synchroniz" in str(w.message)]


def images(n):
    return tudui.cifar10(True, source="synthetic", limit=n)


def syncs_per_step(device, make_loader):
    """Host syncs per training step of train_one_epoch (the difference between 6 and 2 batches)."""
    counts = []
    for batches in (2, 6):
        loader = make_loader(images(64 * batches))
        model = harness.seeded_tudui(device)
        optimizer = harness.sgd(model)
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


def step_variants(device):
    """(channels_last, autocast dtype, fused) of every training step the benchmark times on ``device``, and
    fp16 with a GradScaler (and fused SGD) where its autocast is bf16: GPUs without native bf16 train so.
    Not fp16 on the CPU (a dry run): there it is emulated, seconds a step, and no GPU trains so."""
    amp = harness.autocast_dtype(device)
    fp16 = amp != torch.float16 and device.type != "cpu"
    options = [(None, False), (None, True), (amp, True)] + ([(torch.float16, True)] if fp16 else [])
    return [(channels_last, dtype, fused) for dtype, fused in options for channels_last in (False, True)]


def describe(step, channels_last):
    scaler = ", GradScaler" if step.scaler is not None else ""
    fused = ", fused SGD" if step.optimizer.defaults.get("fused") else ""
    return f"training step {'channels_last' if channels_last else 'NCHW'}, {step.dtype}{scaler}{fused}"


def check_training_steps(device):
    """Every step variant of benchmarks/harness.py trains, with channels_last batches, and never syncs."""
    dataset = images(64 * 7)
    for channels_last, dtype, fused in step_variants(device):
        batches = list(harness.resident_loader(dataset, 64, device, channels_last))
        step = harness.training_step(device, channels_last, amp_dtype=dtype, fused=fused)
        name = describe(step, channels_last)
        layout = torch.channels_last if channels_last else torch.contiguous_format
        before = step.model.model[0].weight.detach().clone()
        step(*batches[0])  # warm-up: one-off set-up, the GradScaler's first scale
        with counting_syncs(device) as syncs:
            for imgs, targets in batches[1:]:
                step(imgs, targets)
        weight = step.model.model[0].weight
        report(f"{name}: trains, batches in its layout", bool(torch.isfinite(weight).all())
               and not torch.equal(before, weight) and batches[0][0].is_contiguous(memory_format=layout))
        report(f"{name}: no host sync per step", None if syncs is None else not syncs,
               "needs CUDA to count" if syncs is None else f"{len(syncs)} in {len(batches) - 1} steps")


def check_resident_equals_totensor(device):
    dataset = images(512)
    loader = tudui.ResidentLoader(dataset, 512, device, shuffle=False)
    on_device, _ = next(iter(loader))
    reference = torch.stack([dataset[i][0] for i in range(len(dataset))])
    report(f"ResidentLoader batches on {device} equal ToTensor() bit for bit",
           on_device.device == device and torch.equal(on_device.cpu(), reference))


def momentum_buffers(optimizer):
    return [state["momentum_buffer"] for state in optimizer.state.values()]


def course_model(device):
    model = harness.seeded_tudui(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)


def check_checkpoint_round_trip(device, folder):
    model, optimizer = course_model(device)
    imgs, targets = next(iter(tudui.ResidentLoader(images(64), 64, device)))
    nn.functional.cross_entropy(model(imgs), targets).backward()
    optimizer.step()
    path = save_checkpoint(os.path.join(folder, "round-trip.pth"), model, optimizer, epoch=1)
    expected = [b.cpu() for b in momentum_buffers(optimizer)]
    saved_on = device
    for hop, target in enumerate((torch.device("cpu"), device, torch.device("cpu"))):
        model, optimizer = course_model(target)
        load_checkpoint(path, model, optimizer, device=target)
        buffers = momentum_buffers(optimizer)
        kept = len(buffers) == len(expected) and all(
            b.device == target and torch.equal(b.cpu(), e) for b, e in zip(buffers, expected))
        report(f"checkpoint saved on {saved_on}, loaded on {target}: momentum buffers kept, on {target}", kept)
        path, saved_on = save_checkpoint(os.path.join(folder, f"hop{hop}.pth"), model, optimizer, epoch=1), target


def fit_two_epochs(model, make_loaders, device, distributed_run):
    train_loader, test_loader = make_loaders(images(256), images(64), 64, device, distributed=distributed_run)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return tudui.fit(model, train_loader, test_loader, nn.CrossEntropyLoss(), optimizer, device, 2,
                     progress=False, log=None)


def check_ddp_one_rank(device, folder):
    """DistributedDataParallel in a group of one process (nccl on CUDA, gloo on the CPU), with both loaders:
    the same weights as a plain run, and a checkpoint without DDP's ``module.`` prefix."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                            device_id=device if device.type == "cuda" else None)
    try:
        for name, make in (("DataLoader", tudui.loaders), ("ResidentLoader", tudui.resident_loaders)):
            ddp = nn.parallel.DistributedDataParallel(
                harness.seeded_tudui(device), device_ids=[device.index] if device.type == "cuda" else None)
            history = fit_two_epochs(ddp, make, device, distributed_run=True)
            plain = harness.seeded_tudui(device)
            fit_two_epochs(plain, make, device, distributed_run=False)
            saved = read_checkpoint(save_checkpoint(os.path.join(folder, f"ddp-{name}.pth"), ddp))["model"]
            same = all(torch.allclose(a, b, atol=1e-4) for a, b in zip(saved.values(), plain.state_dict().values()))
            report(f"DDP ({backend}, one rank), {name}: fit as one process, saved without 'module.'",
                   same and saved.keys() == plain.state_dict().keys(),
                   f"train loss {history.train_loss[0]:.3f} -> {history.train_loss[-1]:.3f}")
            del ddp
    finally:
        gc.collect()  # the DDP models must go before their process group
        distributed.teardown()


def check_quick_mode_offline():
    """A learner's offline GPU machine, no TUDUI_* settings and no CIFAR-10 on disk: lessons stay quick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUDUI_")}
    with tempfile.TemporaryDirectory() as empty:
        _, output = run_bounded([sys.executable, "-c", "import tudui; print(tudui.quick_mode())"], env, empty)
    report("quick_mode() with no settings and no CIFAR-10 on disk", output.strip() == "True", output.strip()[-300:])


def run_bounded(command, env, cwd=None):
    """(exit code, stdout and stderr) of a command line; exit code None when it ran out of time and was stopped."""
    with subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        try:
            output = proc.communicate(timeout=COMMAND_SECONDS)[0]
            return proc.returncode, output
        except subprocess.TimeoutExpired:
            proc.terminate()  # torchrun passes it on to its processes
            try:
                return None, proc.communicate(timeout=15)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                return None, proc.communicate()[0]


def run(name, command, expect_ok=True, must_show=""):
    """Run a command line; PASS when it exits as expected and prints ``must_show``. Returns its output."""
    code, output = run_bounded(command, {**os.environ, "TUDUI_DATA": "synthetic"})
    ok = code is not None and (code == 0) == expect_ok and must_show in output
    lines = [line.strip() for line in output.splitlines() if must_show in line and line.strip()]
    exited = f"stopped after {COMMAND_SECONDS} s" if code is None else f"exit {code}"
    report(name, ok, f"{exited}; {(lines or ['(no output)'])[-1][:160]}" if ok else
           f"{exited}, expected {'0' if expect_ok else 'an error'}"
           f"{' and ' + repr(must_show) if must_show else ''}; output ends:\n{output[-1500:]}")
    return output


def check_cli(device, folder):
    tudui_cli = [sys.executable, "-m", "tudui"]
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
    check_torchrun(device, folder, common)


def check_torchrun(device, folder, common):
    """torchrun: one process trains; more processes than GPUs are refused in one line."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    train = ["-m", "tudui", "train", "--epochs", "1"] + common
    run(f"torchrun, one process on {device}", torchrun + ["--nproc-per-node=1"] + train +
        ["--device", device, "--checkpoint", os.path.join(folder, "torchrun.pth")])
    gpus = torch.cuda.device_count()
    ranks = max(2, gpus + 1)  # a dry run without GPUs: refused for want of CUDA, in one line too
    run(f"torchrun, {ranks} processes on {gpus} GPU(s), refused in one line",
        torchrun + [f"--nproc-per-node={ranks}"] + train +
        ["--device", "cuda", "--checkpoint", os.path.join(folder, "refused.pth")],
        expect_ok=False, must_show="has no GPU of its own" if gpus else "tudui: error: cannot use cuda")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (default), or cpu for a dry run")
    args = p.parse_args(argv)
    global STRICT
    STRICT = args.device == "cuda"
    try:
        device = tudui.pick_device(args.device)  # cuda: cuda:0, the first visible GPU
    except tudui.DeviceError as exc:
        print(f"gpu_checks: error: {exc}; use --device cpu for a dry run", file=sys.stderr)
        return 2
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as folder:
        checks = {"loader syncs": lambda: check_loader_syncs(device),
                  "training steps": lambda: check_training_steps(device),
                  "ResidentLoader pixels": lambda: check_resident_equals_totensor(device),
                  "checkpoint round trip": lambda: check_checkpoint_round_trip(device, folder),
                  "one-rank DDP": lambda: check_ddp_one_rank(device, folder),
                  "quick_mode": check_quick_mode_offline, "cli": lambda: check_cli(args.device, folder)}
        for name, check in checks.items():
            try:
                check()
            except Exception as exc:  # noqa: BLE001 - one broken path must not hide the others
                traceback.print_exc()
                report(f"{name} (stopped early)", False, f"{type(exc).__name__}: {exc}")
    print(f"gpu_checks on {device}: {len(FAILED)} failed{': ' + '; '.join(FAILED) if FAILED else ''}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
