"""The throughput benchmark runs, reports every ratio, and its arithmetic is right."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tudui
from tudui import timing

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "throughput.py"
ENV = {**os.environ, "TUDUI_DATA": "synthetic"}


def run_script(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=timeout)


@pytest.mark.slow
def test_quick_benchmark_runs_and_reports_every_ratio(tmp_path):
    out = tmp_path / "quick.json"
    proc = run_script("--quick", "--device", "cpu", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "device: cpu" in text and f"torch {torch.__version__}" in text and "data: synthetic" in text
    loop = re.search(r"^ratio tudui\.train_one_epoch / minimal loop\s*:\s*([\d.]+)", text, re.M)
    data = re.search(r"^ratio ResidentLoader / DataLoader \(batch 64\)\s*:\s*([\d.]+)", text, re.M)
    assert loop and data, text
    assert "skipped, no accelerator" in text
    # The loop adds a few small tensor ops per batch; a loose floor that timing noise cannot break.
    assert float(loop.group(1)) >= 0.8, text
    results = json.loads(out.read_text())
    assert {r["label"] for r in results["ratios"]} == {"tudui.train_one_epoch / minimal loop",
                                                       "ResidentLoader / DataLoader (batch 64)"}
    assert all(r["images_per_s"] > 0 and r["fraction_of_matmul"] > 0 for r in results["rows"])
    assert results["forward_flops_per_image"] == 24_708_352


def test_forward_flops_from_the_layer_shapes():
    # One multiply-add = 2 FLOPs. A 5x5 conv with padding 2 keeps the size; each MaxPool2d(2) halves it.
    conv1 = (32 * 32 * 32) * (3 * 5 * 5)     # 32 channels of 32x32 outputs, each 3*5*5 multiply-adds
    conv2 = (32 * 16 * 16) * (32 * 5 * 5)    # after the first pooling: 16x16
    conv3 = (64 * 8 * 8) * (32 * 5 * 5)      # after the second pooling: 8x8
    linear1 = 64 * (64 * 4 * 4)              # 1024 inputs (64 channels of 4x4) to 64 outputs
    linear2 = 10 * 64
    multiply_adds = conv1 + conv2 + conv3 + linear1 + linear2
    assert multiply_adds == 12_354_176
    assert timing.forward_flops(tudui.Tudui()) == 2 * multiply_adds
    per_layer = [flops for _, _, flops in timing.flops_by_layer(tudui.Tudui())]
    assert per_layer == [2 * conv1, 2 * conv2, 2 * conv3, 2 * linear1, 2 * linear2]


def test_forward_flops_agree_with_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode
    model = tudui.Tudui()
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 32, 32))
    assert counter.get_total_flops() == timing.forward_flops(model)


@pytest.mark.parametrize("args", [["--device", "bogus"], ["--device", "cuda:x"], ["--quick", "--nope"],
                                  ["--device"]])
def test_bad_arguments_give_one_line_and_exit_2(args):
    proc = run_script(*args, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("throughput.py: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_gpu_is_a_usage_error():
    proc = run_script("--device", "cuda", timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot use cuda" in proc.stderr


def test_interleaved_takes_turns_and_pairs_rounds():
    calls = []
    timings = timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                 repeat=4, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(t.times) for t in timings.values()] == [4, 4]
    fast, slow = timing.Timing([1.0, 2.0, 1.0]), timing.Timing([2.0, 3.0, 4.0])
    assert timing.speed_ratio(fast, slow) == 2.0  # median of 2, 1.5, 4


def test_epoch_breakdown_covers_the_epoch():
    data = tudui.cifar10(True, source="synthetic", limit=128)
    torch.manual_seed(0)
    model = tudui.Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    before = model.model[0].weight.detach().clone()
    seconds = timing.epoch_breakdown(model, tudui.loaders(data, data, 32, num_workers=0)[0],
                                     torch.nn.CrossEntropyLoss(), optimizer, "cpu")
    assert list(seconds) == ["data", "copy", "compute"]
    assert all(s >= 0 for s in seconds.values()) and seconds["compute"] > 0
    assert not torch.equal(before, model.model[0].weight)  # it really trained


def test_minimal_and_tudui_loops_train_alike():
    data = tudui.cifar10(True, source="synthetic", limit=128)
    weights = []
    for loop in ("minimal", "tudui"):
        run = timing.epoch_runner(data, "cpu", kind="batches", loop=loop, batch_size=32)
        run()
        weights.append(run.model.model[0].weight.detach())
    torch.testing.assert_close(weights[0], weights[1])
