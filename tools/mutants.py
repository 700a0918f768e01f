"""Device mutants: put one realistic device mistake at a time into a copy of the project, run the tests that cover
that code, and report which mistakes the tests catch (a mutant "caught" = its tests fail).

Not part of the default test run: each mutant takes a test run (seconds to a minute or two on 2 cores).
First the same tests run on an unchanged copy: they must pass there.
Usage: python tools/mutants.py [NAME ...]   (default: every mutant; exit 1 when one is missed, 2 when the tests
fail without a mutant)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("tudui", "tests", "tools", "benchmarks", "conftest.py", "pyproject.toml")
LOOPS, CHECKPOINTS, RESIDENT = ["tests/test_loops.py"], ["tests/test_checkpoint.py"], ["tests/test_resident.py"]
DEVICES, TIMING, DATA = ["tests/test_device.py"], ["tests/test_timing.py"], ["tests/test_data.py"]
CLI, BENCH = ["tests/test_cli.py"], ["tests/test_benchmarks.py"]

# (name, file, the line(s) as they are, the mistake, the tests that should catch it)
MUTANTS = [
    ("inputs-not-moved", "tudui/loops.py", "imgs = imgs.to(device, non_blocking=True)", "imgs = imgs", LOOPS),
    ("targets-not-moved", "tudui/loops.py", "targets = targets.to(device, non_blocking=True)", "targets = targets",
     LOOPS),
    ("tensor-to-result-discarded", "tudui/loops.py", "imgs = imgs.to(device, non_blocking=True)",
     "imgs.to(device, non_blocking=True)", LOOPS),
    ("image-count-on-the-cpu", "tudui/loops.py", "torch.tensor(float(images), device=device)",
     "torch.tensor(float(images))", LOOPS),
    ("loss-sum-on-the-cpu", "tudui/loops.py", "total_loss = torch.zeros((), device=device)",
     "total_loss = torch.zeros(())", LOOPS),
    ("correct-count-on-the-cpu", "tudui/loops.py", "correct = torch.zeros((), device=device)",
     "correct = torch.zeros(())", LOOPS),
    ("item-every-batch", "tudui/loops.py", "total_loss += loss.detach() * len(targets)",
     "total_loss += loss.item() * len(targets)", LOOPS),
    ("unsynchronized-read", "tudui/loops.py", "sum_across_ranks(totals).tolist()",
     'sum_across_ranks(totals).to("cpu", non_blocking=True).tolist()', LOOPS),
    ("evaluate-builds-a-graph", "tudui/loops.py", "@torch.no_grad()\ndef evaluate(", "def evaluate(", LOOPS),
    ("optimizer-state-before-the-model-moves", "tudui/checkpoint.py",
     "        target.load_state_dict(weights)\n        target.to(device)\n        if optimizer is not None:\n"
     "            optimizer.load_state_dict(ours[\"optimizer\"])",
     "        target.load_state_dict(weights)\n        if optimizer is not None:\n"
     "            optimizer.load_state_dict(ours[\"optimizer\"])\n        target.to(device)", CHECKPOINTS),
    ("rng-state-not-on-the-cpu", "tudui/checkpoint.py", 'torch.set_rng_state(ours["rng"].cpu())',
     'torch.set_rng_state(ours["rng"])', CHECKPOINTS),
    ("loaded-model-not-moved", "tudui/checkpoint.py", "        target.to(device)\n", "", CHECKPOINTS),
    ("resident-images-left-on-the-cpu", "tudui/data.py", "images.float().div_(255).to(self.device)",
     "images.float().div_(255)", RESIDENT),
    ("resident-targets-left-on-the-cpu", "tudui/data.py",
     "torch.as_tensor(dataset.targets, dtype=torch.long).to(self.device)",
     "torch.as_tensor(dataset.targets, dtype=torch.long)", RESIDENT),
    ("resident-order-left-on-the-cpu", "tudui/data.py", "order = order.to(self.device)", "order = order",
     RESIDENT),
    ("auto-ignores-the-accelerator", "tudui/device.py", 'return best_accelerator() or torch.device("cpu")',
     'return torch.device("cpu")', DEVICES),
    ("cuda-index-dropped", "tudui/device.py", "torch.device(kind, index or 0)", "torch.device(kind, 0)", DEVICES),
    ("no-synchronize", "tudui/device.py", "        torch.accelerator.synchronize(device)\n", "        pass\n",
     TIMING + DEVICES),
    ("stopwatch-stops-before-the-gpu", "tudui/timing.py",
     "        synchronize(self.device)\n        self.seconds", "        self.seconds", TIMING),
    ("no-pinned-memory-for-cuda", "tudui/data.py", 'pin_memory=torch.device(device).type == "cuda"',
     "pin_memory=False", DATA),
    ("pinned-memory-everywhere", "tudui/data.py", 'pin_memory=torch.device(device).type == "cuda"',
     "pin_memory=True", DATA),
    ("cli-model-not-moved", "tudui/cli/training.py", "model = Tudui().to(ctx.device)", "model = Tudui()", CLI),
    ("ddp-rank-device-ignored", "tudui/distributed.py", 'return torch.device("cuda", local_rank)',
     'return torch.device("cuda", 0)', ["tests/test_distributed.py"]),
    ("benchmark-model-not-moved", "benchmarks/harness.py", "model = tudui.Tudui().to(device)",
     "model = tudui.Tudui()", BENCH),
]


def apply(tree: Path, file: str, before: str, after: str) -> None:
    path = tree / file
    text = path.read_text(encoding="utf-8")
    if text.count(before) != 1:
        raise SystemExit(f"mutant out of date: {file} has {text.count(before)} copies of {before.splitlines()[0]!r}")
    path.write_text(text.replace(before, after), encoding="utf-8")


def caught(tree: Path, tests: list) -> bool:
    """Whether the tests fail on this tree (the copy's own tudui first on the path): the given tests and the
    pretend GPU's, which run the package's code on a (pretend) cuda:0."""
    pretend = sorted(str(p.relative_to(tree)) for p in (tree / "tests").glob("test_pretend*.py"))  # the pretend GPU's
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "--override-ini", "addopts=",
               "-p", "no:cacheprovider", *pretend, *tests]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(command, cwd=tree, env=env, capture_output=True).returncode != 0


def copy_of_project(tmp: str) -> Path:
    tree = Path(tmp)
    for part in COPIED:
        source = ROOT / part
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, tree / part)
    return tree


def main(names) -> int:
    chosen = [m for m in MUTANTS if not names or m[0] in names]
    with tempfile.TemporaryDirectory() as tmp:  # without a mutant the same tests must pass, else "caught" means nothing
        if caught(copy_of_project(tmp), sorted({test for *_, tests in chosen for test in tests})):
            print("the tests fail without any mutant: fix them first")
            return 2
    missed = []
    for name, file, before, after, tests in chosen:
        with tempfile.TemporaryDirectory() as tmp:
            tree = copy_of_project(tmp)
            apply(tree, file, before, after)
            start = time.perf_counter()
            result = caught(tree, tests)
        print(f"{'caught' if result else 'MISSED'}  {name:42} {time.perf_counter() - start:5.0f} s", flush=True)
        if not result:
            missed.append(name)
    print(f"{len(chosen) - len(missed)} of {len(chosen)} device mutants caught ({1 - len(missed) / len(chosen):.0%})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
