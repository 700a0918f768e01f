"""``python -m tudui rehearse SCRIPT [ARGS...]``: a learner's training script run on a pretend GPU, on any CPU, as
``__main__`` in a scratch working folder. The report names the learner's own line where the script would fail on a
real GPU, and the fix in the script's own style."""
import _thread
import ast
import builtins
import contextlib
import importlib
import io
import os
import runpy
import shutil
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
import torchvision
from torch.utils.data import DataLoader

from .. import data, synthetic
from .. import text as language
from ..text import say
from .console import UsageError
from .pretend_gpu import OnCuda, callers, pretend_gpu

LIMITS = {"Stream": "streams", "Event": "events", "init_process_group": "torchrun", "load_inline": "extensions"}
LESSONS = {"cuda": "02", "to": "03", "load": "04", "numpy": "06"}


@dataclass
class Rehearsal:
    """What a rehearsal found: ``passed``, else the learner's ``line`` (and its ``code``) and the ``error``."""
    script: str
    passed: bool = False
    error: str | None = None
    line: int | None = None
    code: str | None = None
    fix: str | None = None
    notes: list = field(default_factory=list)   # one line each, said once
    loops: int = 0                               # DataLoader loops started
    batches: int = 0                             # batches taken, all loops together
    tensors: int = 0                             # tensors moved onto the GPU
    modules: int = 0                             # modules moved onto the GPU
    syncs: int = 0                               # reads of GPU values by the CPU
    saved: list = field(default_factory=list)   # what the script wrote, in the scratch folder
    seconds: float = 0.0

    def note(self, key, line=None, **fields):
        text = say(key, **fields) + (say("rehearse.at_line", line=line) if line else "")
        if text not in self.notes:
            self.notes.append(text)


def _source(script) -> tuple:
    """The script's path and text; a UsageError when there is none to rehearse."""
    path = Path(script)
    if not path.is_file():
        raise UsageError(say("rehearse.no_file", script=script))
    try:
        text = path.read_text(encoding="utf-8")
        compile(text, str(path), "exec")
    except (UnicodeDecodeError, ValueError):
        raise UsageError(say("rehearse.not_python", script=script)) from None
    except SyntaxError as exc:
        raise UsageError(say("rehearse.syntax", script=script, line=exc.lineno, message=exc.msg)) from None
    return path.resolve(), text


def _line_in(script: Path, frames) -> int | None:
    """The last line of ``script`` among ``frames``, (file, line) pairs."""
    lines = [line for file, line in frames if file == str(script)]
    return lines[-1] if lines else None


class _Watch:
    """The stand-ins a script runs with: DataLoaders that stop after ``batches`` (no workers), CIFAR-10 without
    downloads, and notes on prints, saves and modules moved."""
    real = types.SimpleNamespace(iter=DataLoader.__iter__, print=builtins.print, to=torch.nn.Module.to)

    def __init__(self, script: Path, result: Rehearsal, batches: int):
        self.script, self.result, self.batches, self.modules = script, result, batches, set()
        self.saver = torch.save  # the pretend GPU's: it writes GPU values as a real GPU's torch.save does

    def loader_iter(self, loader):
        self.result.loops += 1
        if loader.num_workers:
            self.result.note("rehearse.note.workers")
            loader.num_workers = 0
        for i, batch in enumerate(self.real.iter(loader)):
            if i == self.batches:
                return
            self.result.batches += 1
            yield batch

    def cifar10(self, root, train=True, transform=None, target_transform=None, download=False):
        where = (Path(root) if Path(root).is_absolute() else self.script.parent / root).resolve()
        if data.cifar10_on_disk(where):
            return torchvision.datasets.CIFAR10(where, train, transform, target_transform)
        self.result.note("rehearse.note.synthetic", where=root)
        return synthetic.SyntheticCIFAR10(train, transform, target_transform, size=64 * (self.batches + 1))

    def print(self, *args, **kwargs):
        if any(isinstance(a, OnCuda) for a in args):
            self.result.note("rehearse.note.print", _line_in(self.script, callers()))
        return self.real.print(*args, **kwargs)

    def save(self, obj, f, *args, **kwargs):
        if isinstance(obj, torch.nn.Module) and any(isinstance(p, OnCuda) for p in obj.parameters()):
            self.result.note("rehearse.note.save_model", _line_in(self.script, callers()))
        return self.saver(obj, f, *args, **kwargs)

    def module_to(self, module, *args, **kwargs):
        moved = self.real.to(module, *args, **kwargs)
        if list(module.parameters()) and all(isinstance(p, OnCuda) for p in module.parameters()):
            self.modules.add(id(module))
            self.result.modules = len(self.modules)
        if isinstance(module, torch.nn.modules.loss._Loss) and not list(module.buffers()):
            self.result.note("rehearse.note.loss", _line_in(self.script, callers()))
        return moved


@contextlib.contextmanager
def _stand_ins(script: Path, result: Rehearsal, batches: int):
    """The script's world for the rehearsal (see :class:`_Watch`), no keyboard, and a SummaryWriter where
    tensorboard is missing."""
    watch = _Watch(script, result, batches)
    board = types.ModuleType("torch.utils.tensorboard")  # where tensorboard is missing: a writer that writes nothing

    def writer(*args, **kwargs):
        result.note("rehearse.note.tensorboard")
        return types.SimpleNamespace(**{n: (lambda *a, **k: None) for n in (
            "add_scalar", "add_scalars", "add_image", "add_images", "add_graph", "close", "flush")})

    board.SummaryWriter = writer
    with contextlib.ExitStack() as stack:
        for owner, name, stand_in in [
                (DataLoader, "__iter__", lambda loader: watch.loader_iter(loader)),
                (torchvision.datasets, "CIFAR10", watch.cifar10), (builtins, "print", watch.print),
                (torch, "save", watch.save), (torch.nn.Module, "to", lambda m, *a, **k: watch.module_to(m, *a, **k)),
                (torch.nn.Module, "cuda", lambda m, device=None: watch.module_to(m, "cuda")),
                (sys, "stdin", io.StringIO()), (sys, "argv", sys.argv)]:
            stack.enter_context(mock.patch.object(owner, name, stand_in))
        try:
            importlib.import_module("torch.utils.tensorboard")
        except ImportError:
            stack.enter_context(mock.patch.dict(sys.modules, {"torch.utils.tensorboard": board}))
        yield


def _read(script: Path, text: str, result: Rehearsal, gpu) -> None:
    """Notes from the script's text and from what moved where while it ran."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "device" \
                and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("cuda") \
                and "is_available" not in text:
            result.note("rehearse.note.no_fallback", node.lineno)
    moves = {_line_in(script, frames) for _, frames in gpu.moved}
    discarded = {node.lineno for node in ast.walk(tree)  # x.to(...) or x.cuda() as a statement: its result lost
                 if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                 and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("to", "cuda")}
    for line in sorted(discarded & moves):
        result.note("rehearse.note.discarded", line)
    result.tensors, result.syncs = len(gpu.moved), gpu.syncs
    if not gpu.moved and not result.modules:
        result.note("rehearse.note.no_gpu")


def _failure(script: Path, text: str, exc: BaseException, result: Rehearsal) -> None:
    """The learner's line where ``exc`` was raised, what it means and the fix in the script's own style."""
    mine = [f for f, _ in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename == str(script)]
    message = str(exc).splitlines()[0].split(" (pretend CUDA")[0] if str(exc) else type(exc).__name__
    result.error = f"{type(exc).__name__}: {message}"
    if not mine:
        return
    frame = next((f for f in mine if _cpu_names(f, text)), mine[-1])  # the learner's outermost line with a CPU value
    result.line = frame.f_lineno
    result.code = text.splitlines()[frame.f_lineno - 1].strip()
    style = "to" if ".to(device)" in text or ".to(" in text and ".cuda()" not in text else "cuda"
    limit = next((what for name, what in LIMITS.items() if name in message or name in result.code), None)
    if "real CUDA runtime" in message or limit:
        result.error = say("rehearse.limit", what=say(f"rehearse.limit.{limit or 'runtime'}"))
    elif "same device" in message:
        on_cpu = _cpu_names(frame, text)
        fixes = [f"{n} = {n}.to(device)" if style == "to" else f"{n} = {n}.cuda()" for n in on_cpu]
        result.fix = say("rehearse.fix", names=", ".join(on_cpu) or "?", fix="; ".join(fixes) or "?",
                         lesson=LESSONS[style])
    elif "numpy" in message or "ByteTensor" in message:
        result.fix = say("rehearse.fix_cpu", lesson=LESSONS["numpy" if "numpy" in message else "load"])


def _cpu_names(frame, text) -> list:
    """The names on ``frame``'s line whose tensors (or module's weights) are on the CPU."""
    try:
        names = [n.id for n in ast.walk(ast.parse(text.splitlines()[frame.f_lineno - 1].strip()))
                 if isinstance(n, ast.Name)]
    except SyntaxError:  # the first line of a statement over several lines
        names = []
    return [n for n in dict.fromkeys(names) if _on_cpu(frame.f_locals.get(n))]


def _on_cpu(value) -> bool:
    if isinstance(value, torch.nn.Module):
        return any(not isinstance(t, OnCuda) for t in (*value.parameters(), *value.buffers()))
    return isinstance(value, torch.Tensor) and not isinstance(value, OnCuda) and value.dim() > 0


def rehearse(script, *args, batches: int = 2, max_seconds: float = 120, lang: str | None = None,
             quiet: bool = False) -> Rehearsal:
    """Run ``script`` (with ``args`` in sys.argv) on a pretend GPU and print the report in ``lang`` (default: the
    language in force); returns a :class:`Rehearsal` a notebook cell can inspect."""
    chosen = list(language._chosen)
    language.set_language(lang or language.language())
    try:
        return _rehearse(script, args, batches, max_seconds, quiet)
    finally:
        language._chosen[:] = chosen


def _rehearse(script, args, batches, max_seconds, quiet) -> Rehearsal:
    path, text = _source(script)
    result, before, cwd = Rehearsal(path.name), list(sys.path), os.getcwd()
    scratch = Path(tempfile.mkdtemp(prefix="tudui-rehearse-"))
    (scratch / "work").mkdir()
    start = time.perf_counter()
    if not quiet:
        print(say("rehearse.start", script=path.name, batches=batches, seconds=max_seconds))
    try:
        os.chdir(scratch / "work")  # relative saves and logs land here; CIFAR-10 is looked for next to the script
        sys.path.insert(0, str(path.parent))
        with pretend_gpu() as gpu, _stand_ins(path, result, batches):
            sys.argv = [str(path), *args]
            _run(path, text, result, max_seconds)
        _read(path, text, result, gpu)
        result.saved = sorted(str(p.relative_to(scratch / "work")) for p in (scratch / "work").rglob("*") if p.is_file())
    finally:
        os.chdir(cwd)
        sys.path[:] = before
        shutil.rmtree(scratch, ignore_errors=True)
    result.seconds = time.perf_counter() - start
    if not quiet:
        print(report(result))
    return result


def _run(path: Path, text: str, result: Rehearsal, max_seconds: float) -> None:
    """The script as ``__main__``, ended by a timer after ``max_seconds``; what it raised, in ``result``."""
    timer = threading.Timer(max_seconds, _thread.interrupt_main)
    timer.daemon = True
    timer.start()
    try:
        runpy.run_path(str(path), run_name="__main__")
        result.passed = True
    except SystemExit as exc:  # the script's own exit: passed only with code 0 (or None)
        result.passed = exc.code in (0, None)
        result.error = None if result.passed else say("rehearse.exit", code=exc.code)
    except KeyboardInterrupt as exc:
        result.error = say("rehearse.interrupted" if timer.is_alive() else "rehearse.timeout", seconds=max_seconds)
        result.line = _line_in(path, [(f.f_code.co_filename, n) for f, n in traceback.walk_tb(exc.__traceback__)])
    except Exception as exc:
        _failure(path, text, exc, result)
    finally:
        timer.cancel()


def report(result: Rehearsal) -> str:
    """The report: passed or where it failed and the fix; the notes; what a rehearsal cannot know."""
    if result.passed:
        lines = [say("rehearse.passed", loops=result.loops, batches=result.batches, tensors=result.tensors,
                     modules=result.modules, syncs=result.syncs)]
    else:
        lines = [say("rehearse.failed", error=result.error)]
        if result.line:
            lines.append(say("rehearse.where", script=result.script, line=result.line, code=result.code or ""))
        lines += [result.fix] if result.fix else []
    lines += [say("rehearse.notes")] + [f"  - {note}" for note in result.notes] if result.notes else []
    if result.saved:
        lines.append(say("rehearse.saved", files=", ".join(result.saved[:6]), n=len(result.saved)))
    lines.append(say("rehearse.limits"))
    return "\n".join(lines)


def run(args) -> int:
    """The command: exit 0 when the rehearsal passed, 1 when the script raised."""
    result = rehearse(args.script, *args.args, batches=args.batches, max_seconds=args.max_seconds, lang=args.lang)
    print(say("rehearse.took", seconds=result.seconds))
    return 0 if result.passed else 1
