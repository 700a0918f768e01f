"""The child process of a rehearsal (see rehearse.py): the learner's script, or a notebook's code cells, run as
``__main__`` on a pretend GPU in the scratch copy of its folder. An audit hook (PEP 578) stops, before it happens,
every write, removal, rename or creation outside the scratch folder and every program started. What it finds goes to
the progress file, one JSON line at a time, so that it survives a kill."""
import ast
import atexit
import builtins
import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from unittest import mock

import torch
from torch.utils.data import DataLoader

from .. import text as language
from ..text import say
from .pretend_gpu import OnCuda, callers, pretend_gpu
from .rehearse import Rehearsal, place

LIMITS = {"Stream": "streams", "Event": "events", "init_process_group": "torchrun", "load_inline": "extensions"}
LESSONS = {"cuda": "02", "to": "03", "load": "04", "numpy": "06"}
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event: (what, ((path argument, its dir_fd argument or None, resolve the last part of the path), ...))
PATHS = {"os.remove": ("remove", ((0, 1, False),)), "os.rmdir": ("remove", ((0, 1, False),)),
         "shutil.rmtree": ("remove", ((0, None, False),)), "os.rename": ("rename", ((0, 2, False), (1, 3, False))),
         "os.mkdir": ("make", ((0, 2, True),)), "os.symlink": ("make", ((1, 2, False),)),
         "os.link": ("make", ((1, 3, False),)), "os.mkfifo": ("make", ((0, 2, True),)),
         "os.mknod": ("make", ((0, 3, True),)), "os.truncate": ("change", ((0, None, True),)),
         "os.chmod": ("change", ((0, 2, True),)), "os.chown": ("change", ((0, 3, True),)),
         "os.utime": ("change", ((0, 3, True),)), "os.setxattr": ("change", ((0, None, True),)),
         "os.removexattr": ("change", ((0, None, True),))}
PROGRAMS = {"os.system": 0, "subprocess.Popen": 1, "os.exec": 0, "os.posix_spawn": 0, "os.spawn": 1, "os.fork": None,
            "os.forkpty": None, "os.startfile": 0}
IMPORTING = "<frozen importlib._bootstrap>"
DEVICES = {os.devnull, "/dev/stdout", "/dev/stderr", "/dev/tty"}
LETHAL = {getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGABRT", "SIGUSR1", "SIGUSR2")
          if hasattr(signal, name)}


class Confined(PermissionError):
    """What the audit hook stopped: not done."""


class Child:
    """The rehearsal's side in the child process: the script's units (a script, or a notebook's cells), the result,
    the audit hook, and the progress file."""

    def __init__(self, config):
        self.config, self.result = config, Rehearsal(config["name"], notes=config["notes"])
        self.units = [(file, cell, text) for file, cell, text in config["units"]]
        self.files = {file: (cell, text.splitlines()) for file, cell, text in self.units}
        self.roots = [os.path.normcase(os.path.realpath(r)) for r in config["roots"]]
        self.fd = os.open(config["progress"], os.O_WRONLY | os.O_APPEND)
        self.gpu, self.modules, self.exits, self.saving, self.done = None, set(), [], False, False
        self.sent, self.now, self.lock = None, {}, threading.Lock()

    def send(self, final=False):
        """The result so far, as one line of the progress file (the last one whole after a kill)."""
        state = {**dataclasses.asdict(self.result), **({} if final else self.now)}
        if not final and state == self.sent:
            return
        self.sent = state
        with self.lock, contextlib.suppress(OSError):
            os.write(self.fd, (json.dumps({"result" if final else "progress": state}) + "\n").encode())

    def here(self, frames=None) -> tuple:
        """(cell, line, code) of the innermost frame of the learner's code in ``frames`` ((file, line) pairs)."""
        mine = [(file, line) for file, line in (callers() if frames is None else frames) if file in self.files]
        if not mine:
            return None, None, None
        cell, lines = self.files[mine[-1][0]]
        return cell, mine[-1][1], lines[mine[-1][1] - 1].strip() if mine[-1][1] <= len(lines) else ""

    def note(self, key, frames=None, **fields):
        cell, line, _ = self.here(frames) if frames is not None else (None, None, None)
        self.result.note(key, place(cell, line) if line else None, **fields)

    def watch(self):
        """Every 0.2 s: the learner's line the script runs now (the main thread's, else another thread's)."""
        main = threading.main_thread().ident
        while not self.done:
            frames = sys._current_frames()
            stacks = [_stack(frames[ident]) for ident in sorted(frames, key=lambda i: i != main)]
            del frames  # a frame kept alive keeps its tensors: a module's .cuda() could not swap them
            for cell, line, code in map(self.here, stacks):
                if line:
                    self.now = {"cell": cell, "line": line, "code": code}
                    break
            self.send()
            time.sleep(0.2)

    def audit(self, event, args):
        """The hook: what would change anything outside the scratch folder, or start a program, is stopped."""
        if event == "open" and not isinstance(args[0], int) and args[2] & WRITES:
            self.confine("save" if self.saving else "write", args[0], None, True)
        elif event in PATHS:
            what, places = PATHS[event]
            for path, dir_fd, follow in places:
                self.confine(what, args[path], args[dir_fd] if dir_fd is not None else None, follow)
        elif event in PROGRAMS:
            program = args[PROGRAMS[event]] if PROGRAMS[event] is not None else event
            program = " ".join(map(os.fsdecode, program)) if isinstance(program, (list, tuple)) else program
            self.stop("rehearse.blocked.program", program=str(os.fsdecode(program))[:80])
        elif event in ("os.kill", "os.killpg"):
            self.signal(event, *args)

    def confine(self, what, path, dir_fd, follow):
        if isinstance(path, int):  # an open file: its name was checked when it was opened
            return
        path = os.fsdecode(path)
        if dir_fd not in (None, -1) and not os.path.isabs(path):
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:  # where /proc is missing: the folder behind dir_fd is unknown
                self.stop(f"rehearse.blocked.{what}", path=path)
        full = os.path.abspath(path)
        real = os.path.realpath(full) if follow else os.path.join(os.path.realpath(os.path.dirname(full)),
                                                                 os.path.basename(full))
        real = os.path.normcase(real)
        if full not in DEVICES and not any(real == r or real.startswith(r + os.sep) for r in self.roots):
            self.stop(f"rehearse.blocked.{what}", path=full)

    def signal(self, event, pid, number):
        own = pid in (0, os.getpid()) if event == "os.kill" else pid == os.getpgid(0)
        if not own:
            self.stop("rehearse.blocked.signal", number=number)
        elif number == getattr(signal, "SIGKILL", None) or number in LETHAL and signal.getsignal(number) == \
                signal.SIG_DFL:  # the end of this process: the result first
            self.ended("rehearse.killed", number, self.here())

    def stop(self, key, **fields):
        """What the hook refuses: noted, unless a library does it while it is imported (a cache, a probe)."""
        frames = callers()
        cell, line, _ = self.here(frames)
        message = say(key, place=place(cell, line), **fields)
        doer = [os.path.normcase(os.path.realpath(f)) for f, _ in frames if f != __file__ and f[:1] != "<"][-1:]
        inside = bool(doer) and doer[0].startswith(self.roots[0] + os.sep)  # the learner's code, or a library's
        library = not inside and any(f == IMPORTING for f, _ in frames)
        if message not in self.result.notes and not library:
            self.result.notes.append(message)
        self.send()
        raise Confined(message)

    def ended(self, key, code, where):
        """The script ends the process (sys.exit, os._exit, a signal) at ``where``: passed with code 0."""
        self.result.passed = code in (0, None)
        self.result.error = None if self.result.passed else say(key, code=code)
        self.result.cell, self.result.line, self.result.code = where
        self.finish()

    def finish(self):
        if self.done:
            return
        self.done = True
        _read(self)
        self.send(final=True)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    def run(self):
        """The script (or the cells) as ``__main__``, then its threads and atexit callbacks, as Python runs them."""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        if self.config["notebook"]:
            main.display = print  # what a notebook shows, printed
        else:
            main.__file__ = self.config["file"]
        try:
            for file, _, text in self.units:
                exec(compile(text, file, "exec", dont_inherit=True), main.__dict__)
            for thread in threading.enumerate():
                if not thread.daemon and thread is not threading.current_thread():
                    thread.join()
            for func, args, kwargs in reversed(self.exits):
                func(*args, **kwargs)
            self.result.passed = True
        except SystemExit as exc:
            self.ended("rehearse.exit", exc.code, self.here(_stack(exc.__traceback__, True)))
        except BaseException as exc:  # the script's own exception, whatever its class
            _failure(self, exc)
        self.finish()


def _stack(frame, is_traceback=False) -> list:
    """(file, line) pairs, outermost first, of a frame and its callers, or of a traceback."""
    if is_traceback:
        return [(f.f_code.co_filename, line) for f, line in traceback.walk_tb(frame)]
    pairs = []
    while frame:
        pairs.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return pairs[::-1]


def _text(exc) -> str:
    try:
        return str(exc)
    except BaseException:  # its __str__ raised
        return say("rehearse.no_str")


class _Watch:
    """The stand-ins a script runs with: DataLoaders that stop after ``batches`` (no workers), datasets without
    downloads, and notes on prints, saves and modules moved."""
    real = types.SimpleNamespace(iter=DataLoader.__iter__, print=builtins.print, to=torch.nn.Module.to)

    def __init__(self, child: Child, batches: int):
        self.child, self.result, self.batches = child, child.result, batches
        self.saver = torch.save  # the pretend GPU's: it writes GPU values as a real GPU's torch.save does

    def loader_iter(self, loader):
        self.result.loops += 1
        if loader.num_workers:
            self.child.note("rehearse.note.workers")
            loader.num_workers = 0
        for i, batch in enumerate(self.real.iter(loader)):
            if i == self.batches:
                return
            self.result.batches += 1
            yield batch

    def cifar10(self, root, train=True, transform=None, target_transform=None, download=False):
        from .. import data, synthetic  # imported before the stand-in replaces CIFAR10 (see datasets)
        where = os.path.realpath(root)
        if data.cifar10_on_disk(where):
            return self.real.CIFAR10(where, train, transform, target_transform)
        self.child.note("rehearse.note.synthetic", where=root)
        return synthetic.SyntheticCIFAR10(train, transform, target_transform, size=64 * (self.batches + 1))

    def datasets(self, torchvision):
        """Stand-ins for torchvision's datasets, once the script has imported torchvision."""
        module = torchvision.datasets
        from .. import data  # noqa: F401  (it imports the real CIFAR10)
        try:
            from .datasets import stand_ins
        except ImportError:
            self.real.CIFAR10 = module.CIFAR10
            module.CIFAR10 = self.cifar10
            return
        for owner, name, stand_in in stand_ins(Path(self.child.config["file"]).parent, self.batches,
                                               self.child.note):
            setattr(owner, name, stand_in)

    def print(self, *args, **kwargs):
        if any(isinstance(a, OnCuda) for a in args):
            self.child.note("rehearse.note.print", callers())
        return self.real.print(*args, **kwargs)

    def save(self, obj, f, *args, **kwargs):
        if isinstance(obj, torch.nn.Module) and any(isinstance(p, OnCuda) for p in obj.parameters()):
            self.child.note("rehearse.note.save_model", callers())
        self.child.saving = True
        try:
            if isinstance(f, (str, bytes, os.PathLike)):  # torch writes a named file from C++, unseen by the hook
                self.child.confine("save", f, None, True)
            return self.saver(obj, f, *args, **kwargs)
        except Confined:  # noted; the script goes on as it would after a save
            return None
        finally:
            self.child.saving = False

    def module_to(self, module, *args, **kwargs):
        moved = self.real.to(module, *args, **kwargs)
        if list(module.parameters()) and all(isinstance(p, OnCuda) for p in module.parameters()):
            self.child.modules.add(id(module))
            self.result.modules = len(self.child.modules)
        if isinstance(module, torch.nn.modules.loss._Loss) and not list(module.buffers()):
            self.child.note("rehearse.note.loss", callers())
        return moved


class _AfterImport:
    """A meta path finder: ``then(module)`` right after ``name`` is imported (torchvision is slow to import: only
    when the script does)."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        run, then = spec.loader.exec_module, self.then
        spec.loader.exec_module = lambda module: (run(module), then(module))
        return spec


def _stand_ins(child: Child, batches: int) -> contextlib.ExitStack:
    """The script's world for the rehearsal (see :class:`_Watch`), atexit callbacks kept to run after the script,
    os._exit that reports first, and a SummaryWriter where tensorboard is missing."""
    watch, stack = _Watch(child, batches), contextlib.ExitStack()
    real_exit = os._exit

    def exit_now(code):
        child.ended("rehearse.os_exit", code, child.here())
        real_exit(code)

    def writer(*args, **kwargs):
        child.note("rehearse.note.tensorboard")
        return types.SimpleNamespace(**{n: (lambda *a, **k: None) for n in (
            "add_scalar", "add_scalars", "add_image", "add_images", "add_graph", "close", "flush")})

    for owner, name, stand_in in [
            (DataLoader, "__iter__", lambda loader: watch.loader_iter(loader)), (builtins, "print", watch.print),
            (torch, "save", watch.save), (torch.nn.Module, "to", lambda m, *a, **k: watch.module_to(m, *a, **k)),
            (torch.nn.Module, "cuda", lambda m, device=None: watch.module_to(m, "cuda")), (os, "_exit", exit_now),
            (atexit, "register", lambda func, *a, **k: child.exits.append((func, a, k)) or func)]:
        stack.enter_context(mock.patch.object(owner, name, stand_in))
    sys.meta_path.insert(0, _AfterImport("torchvision", watch.datasets))
    if importlib.util.find_spec("tensorboard") is None:
        sys.modules["torch.utils.tensorboard"] = types.SimpleNamespace(SummaryWriter=writer)
    return stack


def _read(child: Child) -> None:
    """Notes from the script's text and from what moved where while it ran."""
    result, gpu = child.result, child.gpu
    for file, cell, text in child.units:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "device" \
                    and node.args and isinstance(node.args[0], ast.Constant) \
                    and str(node.args[0].value).startswith("cuda") and "is_available" not in text:
                child.note("rehearse.note.no_fallback", [(file, node.lineno)])
        moves = {line for _, frames in gpu.moved for _, line in _mine(child, frames, file)}
        for node in ast.walk(tree):  # x.to(...) or x.cuda() as a statement: its result lost
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.lineno in moves \
                    and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("to", "cuda"):
                child.note("rehearse.note.discarded", [(file, node.lineno)])
    result.tensors, result.syncs = len(gpu.moved), gpu.syncs
    if not gpu.moved and not result.modules:
        child.note("rehearse.note.no_gpu")


def _mine(child, frames, file) -> list:
    """The innermost of ``frames`` in the learner's code, if it is in ``file``."""
    mine = [pair for pair in frames if pair[0] in child.files]
    return mine[-1:] if mine and mine[-1][0] == file else []


def _failure(child: Child, exc: BaseException) -> None:
    """The learner's line where ``exc`` was raised, what it means and the fix in the script's own style."""
    result, text = child.result, "\n".join(text for _, _, text in child.units)
    mine = [f for f, _ in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename in child.files]
    message = _text(exc)
    message = message.splitlines()[0].split(" (pretend CUDA")[0] if message.strip() else type(exc).__name__
    result.error = f"{type(exc).__name__}: {message}"
    if isinstance(exc, Confined):
        result.notes[:] = [note for note in result.notes if note != message]  # said once, as the error
        result.error = say("rehearse.confined", what=message)
    if not mine:
        return
    frame = next((f for f in mine if _cpu_names(child, f)), mine[-1])  # the outermost learner's line with a CPU value
    result.cell, result.line, result.code = child.here([(frame.f_code.co_filename, frame.f_lineno)])
    style = "to" if ".to(device)" in text or ".to(" in text and ".cuda()" not in text else "cuda"
    limit = next((what for name, what in LIMITS.items() if name in message or name in result.code), None)
    if "real CUDA runtime" in message or limit:
        result.error = say("rehearse.limit", what=say(f"rehearse.limit.{limit or 'runtime'}"))
    elif "same device" in message:
        on_cpu = _cpu_names(child, frame)
        fixes = [f"{n} = {n}.to(device)" if style == "to" else f"{n} = {n}.cuda()" for n in on_cpu]
        result.fix = say("rehearse.fix", names=", ".join(on_cpu) or "?", fix="; ".join(fixes) or "?",
                         lesson=LESSONS[style])
    elif "numpy" in message or "ByteTensor" in message:
        result.fix = say("rehearse.fix_cpu", lesson=LESSONS["numpy" if "numpy" in message else "load"])


def _cpu_names(child: Child, frame) -> list:
    """The names on ``frame``'s line whose tensors (or module's weights) are on the CPU."""
    code = child.here([(frame.f_code.co_filename, frame.f_lineno)])[2]
    try:
        names = [n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)]
    except SyntaxError:  # the first line of a statement over several lines
        names = []
    return [n for n in dict.fromkeys(names) if _on_cpu(frame.f_locals.get(n))]


def _on_cpu(value) -> bool:
    if isinstance(value, torch.nn.Module):
        return any(not isinstance(t, OnCuda) for t in (*value.parameters(), *value.buffers()))
    return isinstance(value, torch.Tensor) and not isinstance(value, OnCuda) and value.dim() > 0


def main():
    """The child's start: the config the rehearsal wrote (its path in argv), then the script, confined."""
    with open(sys.argv[1], encoding="utf-8") as file:
        config = json.load(file)
    language.set_language(config["lang"])
    sys.dont_write_bytecode = True  # a sibling ``import model`` writes no __pycache__
    child = Child(config)
    sys.argv, sys.path[0] = [config["file"], *config["args"]], os.getcwd()
    with pretend_gpu() as child.gpu, _stand_ins(child, config["batches"]):
        sys.addaudithook(child.audit)
        threading.Thread(target=child.watch, daemon=True).start()
        child.run()
    os._exit(0)
