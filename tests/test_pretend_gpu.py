"""Every GPU path, run on the pretend GPU (tudui/cli/pretend_gpu.py): a CPU tensor meeting a cuda:0 one fails here,
as it would on a learner's GPU, though this machine has none."""
from __future__ import annotations

import inspect
import json
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from torch import nn

import tudui
import tudui.loops

import harness
from tudui.cli.pretend_gpu import MIXED, OnCuda, pretend_gpu
from run_notebook_cells import run_code, to_python

ROOT = Path(__file__).resolve().parent.parent

CUDA = torch.device("cuda", 0)
BATCH = 16  # small batches, few images: these tests check where tensors are, not what they learn


@pytest.fixture
def cuda():
    """One pretend GPU for the test; the device the lessons pick on it (cuda:0)."""
    with pretend_gpu():
        yield tudui.pick_device("cuda")


def images(n=2 * BATCH):
    return tudui.cifar10(True, source="synthetic", limit=n)


def on(device, *modules_or_tensors):
    return all(t.device == device for m in modules_or_tensors
               for t in (m.parameters() if isinstance(m, nn.Module) else [m]))


def make_loader(kind, device):
    if kind == "resident":
        return tudui.ResidentLoader(images(), BATCH, device)
    return tudui.loaders(images(), images(), BATCH, device, num_workers=0)[0]  # pinned memory on cuda


def test_the_pretend_gpu_refuses_to_mix_devices(cuda):
    model = tudui.Tudui()  # left on the CPU
    x = torch.ones(2, 3, 32, 32).to(cuda)
    assert isinstance(x, OnCuda) and x.device == CUDA and x.sum().item() == 2 * 3 * 32 * 32
    with pytest.raises(RuntimeError, match="same device"):
        model(x)
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3, 32, 32)
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        x.numpy()
    assert (x * torch.tensor(2.0)).device == CUDA  # a CPU scalar may mix, as on CUDA
    assert torch.equal(x.cpu(), torch.ones(2, 3, 32, 32)) and x.cpu().device.type == "cpu"


@pytest.mark.parametrize("lang, bracket", [("en", " (pretend CUDA, in aten."), ("zh", "（模拟的 CUDA，在 aten.")])
def test_the_mixing_error_is_cudas_then_names_the_pretend_gpu_in_the_language_in_force(cuda, lang, bracket):
    tudui.set_language(lang)  # the language before is restored after each test (conftest)
    with pytest.raises(RuntimeError) as error:
        torch.ones(2).to(cuda) + torch.ones(2)
    assert str(error.value).startswith(MIXED + bracket)  # CUDA's own words first: what the checks and rehearse read


@pytest.mark.parametrize("kind", ["dataloader", "resident"])
def test_fit_trains_on_cuda_with_both_loaders(cuda, kind):
    torch.manual_seed(0)
    model = tudui.Tudui().to(cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    before = [p.cpu() for p in model.parameters()]
    test_loader = tudui.ResidentLoader(images(BATCH), BATCH, cuda, shuffle=False)
    history = tudui.fit(model, make_loader(kind, cuda), test_loader, nn.CrossEntropyLoss(), optimizer, cuda, 1,
                        progress=False, log=None)
    assert history.label == "cuda:0" and 0 < history.train_loss[0] < 10 and history.epochs == [1]
    assert on(cuda, model) and not all(torch.equal(b, p.cpu()) for b, p in zip(before, model.parameters()))
    assert all(on(cuda, s["momentum_buffer"]) for s in optimizer.state.values())


def run_epoch_without(line_start):
    """A copy of tudui.loops.run_epoch without its line that starts with ``line_start``."""
    source = textwrap.dedent(inspect.getsource(tudui.loops.run_epoch))
    kept = [line for line in source.splitlines() if not line.strip().startswith(line_start)]
    assert len(kept) == len(source.splitlines()) - 1, f"run_epoch has no line {line_start!r} any more"
    namespace = dict(vars(tudui.loops))
    exec("\n".join(kept), namespace)
    return namespace["run_epoch"]


@pytest.mark.parametrize("dropped", ["imgs = imgs.to(", "targets = targets.to("])
def test_a_dropped_device_move_in_the_loop_fails_here(cuda, monkeypatch, dropped):
    """The check has teeth: the lessons' loop without one of its .to(device) lines fails on pretend CUDA."""
    monkeypatch.setattr(tudui.loops, "run_epoch", run_epoch_without(dropped))
    model = tudui.Tudui().to(cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with pytest.raises(RuntimeError, match="same device"):
        tudui.train_one_epoch(model, make_loader("dataloader", cuda), nn.CrossEntropyLoss(), optimizer, cuda,
                              progress=False)


def momentum_step(model, optimizer, device):
    imgs, targets = next(iter(tudui.ResidentLoader(images(BATCH), BATCH, device)))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(imgs), targets).backward()
    optimizer.step()


def test_a_cpu_checkpoint_loads_onto_cuda_and_back(cuda, tmp_path):
    def course(device):
        model = tudui.Tudui().to(device)
        return model, torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    model, optimizer = course("cpu")
    momentum_step(model, optimizer, "cpu")
    tudui.save_checkpoint(tmp_path / "cpu.pth", model, optimizer, epoch=1)
    model, optimizer = course(cuda)
    tudui.load_checkpoint(tmp_path / "cpu.pth", model, optimizer, device=cuda)
    momentum_step(model, optimizer, cuda)  # the loaded momentum buffers must be on cuda too
    assert on(cuda, model, *[s["momentum_buffer"] for s in optimizer.state.values()])
    tudui.save_checkpoint(tmp_path / "cuda.pth", model, optimizer, epoch=2)
    for device in ("cpu", cuda):
        back, back_optimizer = course(device)
        tudui.load_checkpoint(tmp_path / "cuda.pth", back, back_optimizer, device=device)
        momentum_step(back, back_optimizer, device)
        assert on(torch.device(device), tudui.load_model(tmp_path / "cuda.pth", device=device), back)


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "channels_last"])
@pytest.mark.parametrize("amp_dtype", [None, torch.bfloat16], ids=["fp32", "bf16-autocast"])
def test_the_benchmarks_training_steps_stay_on_cuda(cuda, channels_last, amp_dtype):
    step = harness.training_step(cuda, channels_last, amp_dtype=amp_dtype)
    loader = harness.resident_loader(images(), BATCH, cuda, channels_last)
    harness.minimal_run(loader, step, cuda)()
    assert on(cuda, step.model)
    with pytest.raises(RuntimeError, match="same device"):  # a batch left on the CPU
        step(*next(iter(tudui.ResidentLoader(images(BATCH), BATCH, "cpu"))))


def test_the_cli_trains_on_cuda_and_resumes_on_cuda_and_cpu(cuda, tmp_path, capsys):
    from tudui.cli import main
    common = ["--data", "synthetic", "--limit", str(2 * BATCH), "--batch-size", str(BATCH), "--no-progress"]
    runs = [(1, "cuda", "cli.pth", []), (2, "cuda", "cli.pth", ["--resume"]), (3, "cpu", "cli.pth", ["--resume"]),
            (1, "cuda", "resident.pth", ["--loader", "resident"])]
    for epochs, device, checkpoint, extra in runs:
        code = main(["train", "--device", device, "--epochs", str(epochs), "--checkpoint", str(tmp_path / checkpoint)]
                    + extra + common)
        out = capsys.readouterr()
        assert code == 0, out.out + out.err
        assert "--resume" not in extra or f"resuming after epoch {epochs - 1}" in out.out + out.err


# Notebook cells that run only on a GPU (an `if torch.cuda.is_available():` branch), run here under pretend
# CUDA with the cells before them. Cells that cannot run here, and why:
CANNOT_RUN = {
    "06-device-errors:3f1b252e": "starts CUDA in a new Python process, where nothing is pretended",
}
GPU_BRANCH = "if torch.cuda.is_available():"


def gpu_notebooks():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
        if any(GPU_BRANCH in "".join(c["source"]) for c in cells):
            yield pytest.param(path, cells, id=path.stem)


GPU_NOTEBOOKS = list(gpu_notebooks())


@pytest.mark.slow
@pytest.mark.parametrize("path, cells", GPU_NOTEBOOKS)
def test_notebook_gpu_branches_run_on_pretend_cuda(cuda, path, cells, monkeypatch, tmp_path):
    """Each notebook's cells, up to its last GPU branch, with few images: its GPU branches must not mix devices."""
    real_cifar10 = tudui.cifar10
    monkeypatch.setattr(tudui, "cifar10", lambda *a, limit=None, **k: real_cifar10(*a, limit=BATCH * 2, **k))
    monkeypatch.setenv("TUDUI_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    last = max(i for i, c in enumerate(cells) if GPU_BRANCH in "".join(c["source"]))
    main = types.ModuleType("__main__")  # pickle finds the notebook's classes as __main__.X, as in Jupyter
    monkeypatch.setitem(sys.modules, "__main__", main)
    namespace = main.__dict__
    for index, cell in enumerate(cells[:last + 1]):
        source = "".join(cell["source"])
        if f"{path.stem}:{cell.get('id')}" in CANNOT_RUN or "raises-exception" in cell["metadata"].get("tags", []):
            continue
        try:
            run_code(to_python(source), namespace, f"<{path.stem} cell {index}>")
        except Exception as exc:  # noqa: BLE001 - which cell, with what
            pytest.fail(f"{path.name} cell {index} (id {cell.get('id')}) on pretend CUDA: {type(exc).__name__}: {exc}")


# --- as strict as a GPU where a lenient pretend GPU would hide a mistake -----------------------------------

def test_a_cpu_scalar_mixes_only_as_an_input_of_an_elementwise_operation(cuda):
    x, scalar = torch.ones(3, device=cuda), torch.tensor(2.0)
    assert (x * scalar).device == CUDA and (x > scalar).device == CUDA and x[scalar.long()].device == CUDA
    total = torch.zeros((), device=cuda)
    for refused in (lambda: torch.stack([total, scalar]), lambda: torch.cat([x, scalar.reshape(1)]),
                    lambda: scalar.add_(total)):
        with pytest.raises(RuntimeError, match="same device"):
            refused()


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), lambda p: torch.optim.Adam(p)],
                         ids=["SGD-momentum", "Adam"])
def test_resuming_onto_the_gpu_moves_the_optimizer_state_and_takes_a_step(cuda, tmp_path, make):
    model = tudui.Tudui()
    optimizer = make(model.parameters())
    momentum_step(model, optimizer, "cpu")
    tudui.save_checkpoint(tmp_path / "cpu.pth", model, optimizer, epoch=1)
    model = tudui.Tudui()  # on the CPU, as a script builds it before it resumes
    optimizer = make(model.parameters())
    tudui.load_checkpoint(tmp_path / "cpu.pth", model, optimizer, device=cuda, restore_rng=True)
    momentum_step(model, optimizer, cuda)
    states = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor) and t.dim()]
    assert states and on(cuda, model, *states)


def test_loading_onto_cuda_gives_cuda_tensors_which_the_cpu_rng_refuses(cuda, tmp_path):
    torch.save({"rng": torch.get_rng_state(), "w": torch.ones(2)}, tmp_path / "f.pth")
    loaded = torch.load(tmp_path / "f.pth", map_location="cuda", weights_only=True)
    assert loaded["w"].device == CUDA and loaded["rng"].device == CUDA
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.set_rng_state(loaded["rng"])  # what a GPU says too: the state must come back with .cpu()


def test_an_epoch_reads_the_gpu_once_per_loop_and_never_unsynchronised(cuda):
    model = tudui.Tudui().to(cuda)
    loader = tudui.ResidentLoader(images(), BATCH, cuda, shuffle=False)
    with pretend_gpu() as gpu:
        tudui.fit(model, loader, loader, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=1e-2),
                  cuda, 2, progress=False, log=None)
    assert (gpu.syncs, gpu.unsynced) == (4, 0)  # two epochs, each one read of its train and its test totals
    with pretend_gpu() as gpu:
        x = torch.ones(2, device=cuda)
        x.sum().item(), x.to("cpu", non_blocking=True), print(x)
    assert (gpu.syncs, gpu.unsynced) == (3, 1)


def test_evaluate_builds_no_autograd_graph(cuda):
    model = tudui.Tudui().to(cuda)
    graphs = []
    model.register_forward_hook(lambda module, inputs, output: graphs.append(output.requires_grad))
    loader = tudui.ResidentLoader(images(BATCH), BATCH, cuda, shuffle=False)
    tudui.evaluate(model, loader, nn.CrossEntropyLoss(), cuda, progress=False)
    assert graphs == [False]


def test_what_was_saved_from_the_gpu_loads_back_onto_it_as_on_a_gpu(cuda, tmp_path):
    model = tudui.Tudui().to(cuda)
    torch.save(model.state_dict(), tmp_path / "w.pth")
    torch.save(model, tmp_path / "m.pth")
    state = torch.load(tmp_path / "w.pth", weights_only=True)  # no map_location: where it was saved from
    whole = torch.load(tmp_path / "m.pth", weights_only=False)
    assert on(CUDA, *state.values(), whole)
    assert torch.equal(state["model.0.weight"].cpu(), model.state_dict()["model.0.weight"].cpu())
    assert on(torch.device("cpu"), *torch.load(tmp_path / "w.pth", map_location="cpu", weights_only=True).values())
    torch.save(torch.ones(2), tmp_path / "cpu.pth")
    assert torch.load(tmp_path / "cpu.pth", weights_only=True).device == torch.device("cpu")


def test_float_and_int_of_a_gpu_value_are_reads_by_the_cpu(cuda):
    x = torch.ones(2, device=cuda)
    with pretend_gpu() as gpu:
        float(x.sum()), int(x.sum())
    assert gpu.syncs == 2
