"""The benchmark harness: every variant trains, ratios compare like with like, no host syncs, honest limits."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tudui

ROOT = Path(__file__).resolve().parent.parent
import harness  # benchmarks/, on pytest's pythonpath, as throughput.py imports them
import limits
import throughput

TINY = dict(loop_images=32, loop_repeat=2, images=32, repeat=2, matmul=64, matmul_s=0.01)


@pytest.fixture(scope="module")
def tiny_set():
    return tudui.cifar10(True, source="synthetic", limit=32)


def mean_loss(model, loader):
    with torch.no_grad():
        losses = [torch.nn.functional.cross_entropy(model(imgs), targets) for imgs, targets in loader]
    return torch.stack(losses).mean().item()


# --- every variant trains -------------------------------------------------------------------------

@pytest.mark.parametrize("channels_last, amp_dtype", [(False, None), (True, None), (False, torch.bfloat16),
                                                       (True, torch.bfloat16), (False, torch.float16)])
def test_every_option_trains_and_lowers_the_loss(tiny_set, channels_last, amp_dtype):
    loader = harness.resident_loader(tiny_set, 8, "cpu", channels_last)
    step = harness.training_step("cpu", channels_last, amp_dtype)
    run = harness.minimal_run(loader, step, "cpu")
    before = mean_loss(run.model, loader)
    for _ in range(3):
        run()
    assert mean_loss(run.model, loader) < before - 0.03  # 12 steps at the course's lr: about -0.06
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert run.model.model[0].weight.is_contiguous(memory_format=layout)


@pytest.mark.parametrize("make_loader", [lambda data: tudui.ResidentLoader(data, 8),
                                         lambda data: tudui.loaders(data, data, 8, num_workers=0)[0]])
def test_tudui_runs_train_and_lower_the_loss(tiny_set, make_loader):
    run = harness.tudui_run(make_loader(tiny_set), "cpu")
    everything = [next(iter(tudui.ResidentLoader(tiny_set, len(tiny_set))))]
    before = mean_loss(run.model, everything)
    for _ in range(3):
        run()
    assert mean_loss(run.model, everything) < before - 0.03


def test_minimal_loop_and_tudui_loop_train_alike(tiny_set):
    batches = list(tudui.ResidentLoader(tiny_set, 8, shuffle=False))
    runs = throughput.loop_runs(batches, "cpu")
    for run in runs.values():
        run()
    minimal, ours = (run.model.model[0].weight for run in runs.values())
    torch.testing.assert_close(minimal, ours)


# --- ratios compare the same loop ------------------------------------------------------------------

def test_option_runs_share_loop_and_optimizer_and_differ_in_one_option(tiny_set):
    runs = throughput.option_runs(tiny_set, 8, "cpu", torch.bfloat16)
    baseline, *tuned = runs
    assert baseline == "resident, minimal loop"
    assert tuned == ["resident + channels_last", "resident + autocast bf16", "resident + channels_last + bf16"]
    assert [run.dtype for run in runs.values()] == ["float32", "float32", "bfloat16", "bfloat16"]
    assert {run.loop for run in runs.values()} == {harness.minimal_epoch}
    assert all(run.step.optimizer.defaults == runs[baseline].step.optimizer.defaults for run in runs.values())
    assert runs[baseline].step.optimizer.defaults["fused"] is True
    for run in runs.values():  # same starting weights: only the option differs
        torch.testing.assert_close(run.model.model[0].weight, runs[baseline].model.model[0].weight)


def test_loader_runs_share_the_lessons_loop(tiny_set):
    runs = throughput.loader_runs(tiny_set, 8, "cpu")
    assert list(runs) == ["DataLoader (PIL + ToTensor)", "ResidentLoader"]
    assert {run.loop for run in runs.values()} == {tudui.train_one_epoch}


# --- autocast dtype and GradScaler ------------------------------------------------------------------

@pytest.mark.parametrize("capability, name, dtype", [
    ((7, 5), "Tesla T4", torch.float16), ((8, 0), "A100", torch.bfloat16), ((9, 0), "H100", torch.bfloat16),
    ((6, 1), "NVIDIA GeForce GTX 1060", None),                        # fp16 far slower than fp32: no autocast
    ((7, 5), "NVIDIA GeForce GTX 1650", None), ((7, 5), "NVIDIA GeForce MX450", None),  # no tensor cores
])
def test_bf16_only_where_the_gpu_has_it_and_fp16_only_where_it_pays(monkeypatch, capability, name, dtype):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: asked.append(device) or capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # true on a T4 too: emulation
    assert harness.autocast_dtype("cuda:1") == dtype
    assert asked == [torch.device("cuda", 1)]  # the device passed in decides, not the current one


def test_autocast_dtype_elsewhere():
    assert harness.autocast_dtype("mps") == torch.float16
    assert harness.autocast_dtype("cpu") == torch.bfloat16


def test_fp16_gets_a_scaler_and_a_fused_optimizer():
    step = harness.training_step("cpu", amp_dtype=torch.float16)
    assert isinstance(step.scaler, torch.amp.GradScaler)
    assert step.optimizer.defaults["fused"] is True
    assert harness.training_step("cpu", amp_dtype=torch.bfloat16).scaler is None
    assert harness.grad_scaler("mps", torch.float16) is None


# --- host syncs ----------------------------------------------------------------------------------

@pytest.fixture
def host_syncs(monkeypatch):
    """Counts the calls that make the host wait for the device (tensor to Python value)."""
    count = {"n": 0}
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original):
            count["n"] += 1
            return _original(self, *args)
        monkeypatch.setattr(torch.Tensor, name, counted)
    return count


def four_steps(step):
    imgs, targets = torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,))
    for _ in range(4):
        step(imgs, targets)


@pytest.mark.parametrize("amp_dtype", [None, torch.bfloat16, torch.float16])
def test_training_steps_never_wait_for_the_device(host_syncs, amp_dtype):
    four_steps(harness.training_step("cpu", amp_dtype=amp_dtype))
    assert host_syncs["n"] == 0


def test_the_sync_counter_sees_a_scaler_with_a_plain_optimizer(host_syncs):
    model = tudui.Tudui()
    optimizer, scaler = torch.optim.SGD(model.parameters(), lr=1e-2), torch.amp.GradScaler("cpu")

    def step(imgs, targets):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(imgs), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # not fused: asks the host whether any gradient was inf, every step
        scaler.update()
    four_steps(step)
    assert host_syncs["n"] == 4


@pytest.mark.gpu
@pytest.mark.parametrize("amp_dtype", [None, torch.bfloat16, torch.float16])
def test_training_steps_on_gpu_never_sync(amp_dtype):
    step = harness.training_step("cuda", channels_last=True, amp_dtype=amp_dtype)
    imgs, targets = torch.rand(64, 3, 32, 32, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    step(imgs, targets)  # first step: one-off set-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(4):
            step(imgs, targets)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert (step.scaler is not None) == (amp_dtype == torch.float16)


# --- FLOPs and the matmul limit ------------------------------------------------------------------

def test_flops_match_the_arithmetic_from_the_layer_shapes():
    # One multiply-add = 2 FLOPs. A 5x5 conv with padding 2 keeps the size; each MaxPool2d(2) halves it.
    conv1 = (32 * 32 * 32) * (3 * 5 * 5)     # 32 channels of 32x32 outputs, each 3*5*5 multiply-adds
    conv2 = (32 * 16 * 16) * (32 * 5 * 5)
    conv3 = (64 * 8 * 8) * (32 * 5 * 5)
    linear1, linear2 = 64 * (64 * 4 * 4), 10 * 64
    forward = 2 * (conv1 + conv2 + conv3 + linear1 + linear2)
    assert limits.flops_per_image() == forward
    # backward: gradients of weights and of inputs, each as costly as the forward; the images need none
    assert limits.flops_per_image(train=True) == 3 * forward - 2 * conv1


def test_fp32_matmul_limit_uses_the_convolutions_tf32_setting(monkeypatch):
    seen = []

    class FakeTimer:
        def __init__(self, stmt, globals, num_threads):
            assert num_threads == torch.get_num_threads()

        def blocked_autorange(self, min_run_time):
            seen.append(torch.backends.cuda.matmul.allow_tf32)
            return type("Measurement", (), {"times": [0.7, 0.5, 0.6]})

    monkeypatch.setattr("torch.utils.benchmark.Timer", FakeTimer)
    monkeypatch.setattr(limits, "tf32_like_convolutions", lambda device: True)
    before = torch.backends.cuda.matmul.allow_tf32
    assert limits.matmul_flops_per_s("cpu", torch.float32, n=8) == 2 * 8 ** 3 / 0.5  # the fastest run
    assert limits.matmul_flops_per_s("cpu", torch.bfloat16, n=8) == 2 * 8 ** 3 / 0.5
    assert seen == [True, before] and torch.backends.cuda.matmul.allow_tf32 == before


def test_tf32_setting_of_the_convolutions(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert limits.tf32_like_convolutions("cuda") is False
    assert limits.tf32_like_convolutions("cpu") is None


# --- the script ----------------------------------------------------------------------------------

def test_quick_benchmark_runs_and_writes_its_json(tmp_path):
    out = tmp_path / "quick.json"
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import throughput; "
            f"throughput.SIZES['cpu', True] = {TINY!r}; "
            f"sys.exit(throughput.main(['--quick', '--device', 'cpu', '--json', {str(out)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # torch.utils.cpp_extension's notice on a machine with a CUDA toolkit but no GPU (torch 2.7 prints it) is not ours
    assert [line for line in proc.stderr.splitlines() if not line.startswith("No CUDA runtime is found")] == []
    assert "device: cpu" in proc.stdout and f"torch {torch.__version__}" in proc.stdout
    assert "skipped, no accelerator" in proc.stdout
    results = json.loads(out.read_text())
    assert results["images"] == TINY["images"] and results["data"] == "synthetic" and results["quick"] is True
    assert [r["path"] for r in results["rows"]] == ["minimal loop (pre-built batches)",
                                                    "tudui.train_one_epoch (same batches)",
                                                    "DataLoader (PIL + ToTensor)", "ResidentLoader"]
    for ratio in results["ratios"]:
        assert f"ratio {ratio['label']}" in proc.stdout
    assert [r["label"] for r in results["ratios"]] == ["tudui.train_one_epoch / minimal loop",
                                                       "ResidentLoader / DataLoader (batch 64)"]
    flops = results["train_flops_per_image"] / results["matmul_flops_per_s"]["float32"]
    for row in results["rows"]:
        assert row["fraction_of_matmul"] == pytest.approx(row["images_per_s"] * flops)


@pytest.mark.parametrize("args, says", [(["--device", "bogus"], "unknown device"),
                                        (["--quick", "--nope"], "unrecognized arguments"),
                                        (["--device"], "expected one argument"),
                                        (["--device", "cpu", "--data", "nope"], "data source")])
def test_bad_arguments_give_one_line_and_exit_2(capsys, args, says):
    assert throughput.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("throughput.py: error:") and says in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_gpu_is_a_usage_error(capsys):
    assert throughput.main(["--device", "cuda"]) == 2
    assert "cannot use cuda" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16])
def test_every_variant_trains_on_the_gpu(tiny_set, amp_dtype):
    runs = {**throughput.loader_runs(tiny_set, 8, "cuda"), **throughput.option_runs(tiny_set, 8, "cuda", amp_dtype)}
    for name, run in runs.items():
        before = run.model.model[0].weight.detach().clone()
        run()
        after = run.model.model[0].weight
        assert after.is_cuda and torch.isfinite(after).all() and not torch.equal(before, after), name
