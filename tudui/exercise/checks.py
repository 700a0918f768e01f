"""The checks of every lesson's questions: ``l03_q2(answer, texts, run_epoch=...)`` raises an Outcome when the answer
is wrong (its text key names what was wrong) and returns when it is right. Device questions run the learner's code on
the pretend GPU, on tiny synthetic batches."""
import ast
import contextlib
import linecache
import os
import tempfile
import traceback
from unittest import mock

import torch
from torch import nn

from ..cli.pretend_gpu import OnCuda, pretend_gpu
from ..model import Tudui
from . import Outcome

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def choice(answer, texts):
    """A multiple-choice question: the letter of the answer; every wrong letter has its explanation."""
    letter = str(answer).strip().lower()[:1]
    if letter not in texts["choices"]:
        raise Outcome("incorrect", "not_a_choice", choices=", ".join(texts["choices"]))
    if letter != texts["answer"]:
        raise Outcome("incorrect", f"why_{letter}")


def batches(n=3, size=8):
    torch.manual_seed(0)
    return [(torch.rand(size, 3, 32, 32), torch.randint(0, 10, (size,))) for _ in range(n)]


def on_cpu(frame, code) -> list:
    """The names on the learner's line whose tensors (or module's weights) are on the CPU."""
    try:
        names = dict.fromkeys(n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name))
    except SyntaxError:
        names = {}
    values = {n: frame.f_locals.get(n) for n in names}
    return [n for n, v in values.items() if isinstance(v, nn.Module) and any(
        not isinstance(p, OnCuda) for p in v.parameters()) or isinstance(v, torch.Tensor)
        and not isinstance(v, OnCuda) and v.dim() > 0]


def run(fn, *args, **kwargs):
    """``fn(*args)``; what it raised, as the learner's error at the learner's line."""
    try:
        return fn(*args, **kwargs)
    except Outcome:
        raise
    except Exception as exc:
        mine = [(f, n) for f, n in traceback.walk_tb(exc.__traceback__)
                if f.f_code.co_filename == fn.__code__.co_filename]
        frame, line = mine[-1] if mine else (None, 0)
        code = linecache.getline(fn.__code__.co_filename, line).strip() if frame else ""
        where = dict(fn=fn.__name__, line=line, code=code, error=f"{type(exc).__name__}: {str(exc)[:120]}")
        if "same device" in str(exc) or "Input type" in str(exc):
            raise Outcome("incorrect", "on_cpu", names=", ".join(on_cpu(frame, code)) or "?", **where) from None
        raise Outcome("incorrect", "learner_error", **where) from None


def trained(model, before) -> bool:
    return any(not torch.equal(b, a.elem if isinstance(a, OnCuda) else a) for b, a in
               zip(before, model.parameters()))


def l01_q1(answer, texts, test_loop):
    model, grad = Tudui(), []
    model.register_forward_hook(lambda *_: grad.append(torch.is_grad_enabled()))
    data = batches()
    accuracy = run(test_loop, model, data, nn.CrossEntropyLoss())
    if any(grad):
        raise Outcome("incorrect", "grad_on", fn="test_loop")
    if not isinstance(accuracy, float):
        raise Outcome("incorrect", "not_a_float", type=type(accuracy).__name__)
    with torch.no_grad():
        right = sum((model(x).argmax(1) == y).sum().item() for x, y in data) / sum(len(y) for _, y in data)
    if abs(accuracy - right) > 1e-6:
        raise Outcome("incorrect", "wrong_value", got=accuracy, want=right)


def _train_on_gpu(step, *args):
    """One call of the learner's ``step(model, imgs, targets, loss_fn, optimizer, *args)`` on the pretend GPU."""
    with pretend_gpu():
        model = Tudui().cuda()
        before = [p.elem.clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        imgs, targets = batches(1)[0]
        run(step, model, imgs, targets, nn.CrossEntropyLoss(), optimizer, *args)
        if not trained(model, before):
            raise Outcome("incorrect", "not_trained", fn=step.__name__)


def l02_q1(answer, texts, train_step):
    _train_on_gpu(train_step)


def l02_q2(answer, texts, make_loss):
    with pretend_gpu():
        loss_fn = run(make_loss, torch.tensor([1.0] * 9 + [5.0]))
        outputs, targets = torch.randn(4, 10).cuda(), torch.tensor([0, 9, 9, 1]).cuda()
        if not isinstance(loss_fn, nn.Module):
            raise Outcome("incorrect", "not_a_loss")
        try:
            loss_fn(outputs, targets)
        except RuntimeError:
            raise Outcome("incorrect", "weight_on_cpu") from None


def l03_q1(answer, texts, move):
    with pretend_gpu():
        moved = run(move, torch.ones(3), CUDA)
    if not isinstance(moved, OnCuda):
        raise Outcome("incorrect", "discarded")


def reads(fn) -> int:
    """Reads of GPU values by the CPU while ``fn(model, batches)`` runs once on the pretend GPU."""
    with pretend_gpu() as gpu:
        fn(Tudui().cuda(), batches())
    return gpu.syncs


def l03_q2(answer, texts, run_epoch):
    loss_fn = nn.CrossEntropyLoss()
    trains = reads(lambda m, data: run(run_epoch, m, data, loss_fn, CUDA, torch.optim.SGD(m.parameters(), lr=0.1)))
    tests = reads(lambda m, data: run(run_epoch, m, data, loss_fn, CUDA))
    if max(trains, tests) > 2:
        raise Outcome("incorrect", "reads", n=max(trains, tests), batches=3)


@contextlib.contextmanager
def loads():
    """The keyword arguments of every torch.load call inside, in a list; the file read onto the CPU."""
    calls, real = [], torch.load
    def load(f, *args, **kwargs):
        calls.append({**dict(zip(("map_location", "pickle_module"), args)), **kwargs})
        return real(f, map_location="cpu", weights_only=False)
    with mock.patch.object(torch, "load", load):
        yield calls


def _load_check(fn, obj):
    with tempfile.TemporaryDirectory() as folder, loads() as calls:
        path = os.path.join(folder, "tudui_9.pth")
        torch.save(obj, path)
        result = run(fn, path)
    cpu = str(calls[-1].get("map_location", "")) == "cpu" if calls else False
    if not cpu:
        raise Outcome("incorrect", "no_map_location")
    return calls[-1], result


def l04_q1(answer, texts, load_weights):
    _, state = _load_check(load_weights, Tudui().state_dict())
    if not isinstance(state, dict):
        raise Outcome("incorrect", "not_a_state_dict")


def l04_q2(answer, texts, load_course_model):
    kwargs, model = _load_check(load_course_model, Tudui())
    if kwargs.get("weights_only", True) is not False:
        raise Outcome("incorrect", "weights_only")
    if not isinstance(model, nn.Module):
        raise Outcome("incorrect", "not_a_model")


def l04_q3(answer, texts, resume):
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    nn.functional.cross_entropy(model(batches(1)[0][0]), batches(1)[0][1]).backward()
    optimizer.step()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "resume.pth")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        with pretend_gpu():
            pair = run(resume, path, CUDA)
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise Outcome("incorrect", "not_a_pair", type=type(pair).__name__)
            model, optimizer = pair
            imgs, targets = batches(1)[0]
            try:
                nn.functional.cross_entropy(model(imgs.cuda()), targets.cuda()).backward()
                optimizer.step()
            except RuntimeError:
                raise Outcome("incorrect", "state_on_cpu") from None


def l05_q2(answer, texts, pick_device):
    here = str(run(pick_device))
    with pretend_gpu():
        there = str(run(pick_device))
    if not there.startswith("cuda"):
        raise Outcome("incorrect", "no_gpu_taken", got=there)
    if here.startswith("cuda") != torch.cuda.is_available():
        raise Outcome("incorrect", "no_fallback", got=here)


def l06_q1(answer, texts, to_numpy):
    with pretend_gpu():
        values = run(to_numpy, torch.ones(3, device="cuda", requires_grad=True) * 2)
    if type(values).__module__ != "numpy":
        raise Outcome("incorrect", "not_numpy", type=type(values).__name__)


def l06_q3(answer, texts, predict):
    with pretend_gpu():
        labels = run(predict, Tudui().cuda(), batches(1)[0][0], CUDA)
    if not (isinstance(labels, list) and len(labels) == 8):
        raise Outcome("incorrect", "not_a_list", type=type(labels).__name__)


def l07_q1(answer, texts, time_gpu):
    events = []
    sync = lambda *a, **k: events.append("sync")  # noqa: E731
    with pretend_gpu(), mock.patch.object(torch.cuda, "synchronize", sync), \
            mock.patch.object(torch.accelerator, "synchronize", sync):
        seconds = run(time_gpu, lambda: events.append("work"), CUDA)
    order = "".join(e[0] for e in events)  # s: a synchronize, w: the work
    if "sw" not in order:
        raise Outcome("incorrect", "no_sync_before")
    if "ws" not in order:
        raise Outcome("incorrect", "no_sync_after")
    if not isinstance(seconds, float):
        raise Outcome("incorrect", "not_a_float", type=type(seconds).__name__)


def l07_q2(answer, texts, train_epoch):
    n = reads(lambda m, data: run(train_epoch, m, torch.optim.SGD(m.parameters(), lr=0.1),
                                  [(x.cuda(), y.cuda()) for x, y in data], CUDA))
    if n > 1:
        raise Outcome("incorrect", "reads", n=n, batches=3)


def l07_q3(answer, texts, make_loader):
    loader = run(make_loader, torch.utils.data.TensorDataset(*batches(1)[0]))
    if not getattr(loader, "pin_memory", False):
        raise Outcome("incorrect", "not_pinned")


def l08_q1(answer, texts, save_on_rank0):
    wrapper = nn.Module()
    wrapper.module = Tudui()  # what DDP holds: the model as its attribute ``module``
    with tempfile.TemporaryDirectory() as folder:
        for rank in (1, 0):
            run(save_on_rank0, wrapper, rank, os.path.join(folder, f"rank{rank}.pth"))
            saved = sorted(os.listdir(folder))
            if rank == 1 and saved:
                raise Outcome("incorrect", "every_rank_saves")
        if not saved:
            raise Outcome("incorrect", "nothing_saved")
        try:
            keys = list(torch.load(os.path.join(folder, saved[0]), weights_only=True))
        except Exception:  # a whole pickled model, or not a checkpoint at all
            raise Outcome("incorrect", "not_a_state_dict") from None
    if any(str(k).startswith("module.") for k in keys):
        raise Outcome("incorrect", "prefix")
