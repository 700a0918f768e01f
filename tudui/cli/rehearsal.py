"""The child process of a rehearsal (see rehearse.py): the learner's script, or a notebook's code cells, run as
``__main__`` on a pretend GPU in the scratch copy of its folder. An audit hook (PEP 578) stops, before it happens,
every write, removal, rename or creation outside the scratch folder and every program started. What it finds goes to
the progress file, one JSON line at a time, so that it survives a kill. The process ends with os._exit: nothing the
stand-ins replace is put back."""
import ast
import atexit
import builtins
import contextlib
import dataclasses
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
from .pretend_gpu import MIXED, OnCuda, callers, pretend_gpu
from .rehearse import Rehearsal, place

REAL = types.SimpleNamespace(iter=DataLoader.__iter__, print=builtins.print, to=torch.nn.Module.to, exit=os._exit)
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
    the audit hook, the stand-ins the script runs with, and the progress file."""

    def __init__(self, config, scratch: Path):
        self.file, self.batches = os.path.abspath(config["name"]), config["batches"]  # the cwd is the scratch copy
        self.units = [(self.file if cell is None else name, cell, text) for name, cell, text in config["units"]]
        self.files = {file: (cell, text.splitlines()) for file, cell, text in self.units}
        self.roots = [os.path.normcase(os.path.realpath(scratch / part)) for part in ("work", "tmp")]
        self.fd = os.open(scratch / "progress.jsonl", os.O_WRONLY | os.O_APPEND)
        self.result, self.notebook = Rehearsal(config["name"], notes=config["notes"]), config["notebook"]
        self.gpu, self.modules, self.exits, self.done = None, set(), [], False
        self.in_place = set()  # (cell, line) of the learner's lines that moved a module: in place, nothing thrown away
        self.sent, self.now, self.lock = None, {}, threading.Lock()

    def send(self, final=False):
        """The result so far, as one line of the progress file (the last one whole after a kill); the final one, with
        ``passed`` or an ``error``, last."""
        with self.lock:
            state = {**dataclasses.asdict(self.result), **({} if final else self.now)}
            if final or state != self.sent and not self.done:
                self.sent = state
                with contextlib.suppress(OSError):
                    os.write(self.fd, (json.dumps(state) + "\n").encode())

    def here(self, frames=None) -> tuple:
        """(cell, line, code) of the innermost frame of the learner's code in ``frames`` ((file, line) pairs)."""
        mine = [(file, line) for file, line in (callers() if frames is None else frames) if file in self.files]
        if not mine:
            return None, None, None
        (cell, lines), line = self.files[mine[-1][0]], mine[-1][1]
        return cell, line, lines[line - 1].strip() if line <= len(lines) else ""

    def note(self, key, frames=(), **fields):
        """A note, said once; at the learner's line in ``frames`` if there is one."""
        cell, line, _ = self.here(frames)
        text = say(key, **fields) + (say("rehearse.at", place=place(cell, line)) if line else "")
        if text not in self.result.notes:
            self.result.notes.append(text)

    def watch(self):
        """Every 0.2 s: the learner's line the script runs now (the main thread's, else another thread's)."""
        main = threading.main_thread().ident
        while not self.done:
            frames = sys._current_frames()
            stacks = [[(f.f_code.co_filename, n) for f, n in traceback.walk_stack(frames[ident])][::-1]
                      for ident in sorted(frames, key=lambda i: i != main)]
            del frames  # a frame kept alive keeps its tensors: a module's .cuda() could not swap them
            found = [where for where in map(self.here, stacks) if where[1]]
            self.now = dict(zip(("cell", "line", "code"), found[0])) if found else self.now
            self.send()
            time.sleep(0.2)

    def audit(self, event, args):
        """The hook: what would change anything outside the scratch folder, or start a program, is stopped."""
        if event == "open" and not isinstance(args[0], int) and args[2] & WRITES:
            self.confine("write", args[0], None, True)
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
        own = pid in (0, os.getpid())
        if sys.platform != "win32" and event == "os.killpg":  # Windows has no process groups
            own = pid == os.getpgid(0)
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
        if message not in self.result.notes and (inside or all(f != IMPORTING for f, _ in frames)):
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
        self.read()
        self.send(final=True)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    def run(self):
        """The script (or the cells) as ``__main__``, then its threads and atexit callbacks, as Python runs them."""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        if self.notebook:
            main.display = print  # what a notebook shows, printed
        else:
            main.__file__ = self.file
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
            frames = [(f.f_code.co_filename, n) for f, n in traceback.walk_tb(exc.__traceback__)]
            self.ended("rehearse.exit", exc.code, self.here(frames))
        except BaseException as exc:  # the script's own exception, whatever its class
            self.failed(exc)
        self.finish()

    def read(self):
        """Notes from the script's text and from what moved where while it ran."""
        moves = {self.here(frames)[:2] for _, frames in self.gpu.moved} - self.in_place  # lines that moved tensors
        for file, cell, text in self.units:
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "device" \
                        and node.args and isinstance(node.args[0], ast.Constant) \
                        and str(node.args[0].value).startswith("cuda") and "is_available" not in text:
                    self.note("rehearse.note.no_fallback", [(file, node.lineno)])
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and (cell, node.lineno) in moves \
                        and getattr(node.value.func, "attr", "") in ("to", "cuda"):  # x.to(...) alone: result lost
                    self.note("rehearse.note.discarded", [(file, node.lineno)])
        self.result.tensors, self.result.syncs = len(self.gpu.moved), self.gpu.syncs
        if not self.gpu.moved and not self.result.modules:
            self.note("rehearse.note.no_gpu")

    def failed(self, exc: BaseException):
        """The learner's line where ``exc`` was raised, what it means and the fix in the script's own style."""
        result, text = self.result, "\n".join(text for _, _, text in self.units)
        try:
            message = str(exc)
        except BaseException:  # its __str__ raised
            message = say("rehearse.no_str")
        message = message.splitlines()[0] if message.strip() else type(exc).__name__
        message = message[:message.find(MIXED) + len(MIXED)] if MIXED in message else message  # CUDA's words only
        result.error = f"{type(exc).__name__}: {message}"
        if isinstance(exc, Confined):
            result.notes[:] = [note for note in result.notes if note != message]  # said once, as the error
            result.error = say("rehearse.confined", what=message)
        mine = [f for f, _ in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename in self.files]
        if not mine:
            return
        frame = next((f for f in mine if self.on_cpu(f)), mine[-1])  # the outermost learner's line with a CPU value
        result.cell, result.line, result.code = self.here([(frame.f_code.co_filename, frame.f_lineno)])
        style = "to" if ".to(device)" in text or ".to(" in text and ".cuda()" not in text else "cuda"
        limit = next((what for name, what in LIMITS.items() if name in message or name in result.code), None)
        if "real CUDA runtime" in message or limit:
            result.error = say("rehearse.limit", what=say(f"rehearse.limit.{limit or 'runtime'}"))
        elif "same device" in message:
            on_cpu = self.on_cpu(frame)
            fixes = [f"{n} = {n}.to(device)" if style == "to" else f"{n} = {n}.cuda()" for n in on_cpu]
            result.fix = say("rehearse.fix", names=", ".join(on_cpu) or "?", fix="; ".join(fixes) or "?",
                             lesson=LESSONS[style])
        elif "numpy" in message or "ByteTensor" in message:
            result.fix = say("rehearse.fix_cpu", lesson=LESSONS["numpy" if "numpy" in message else "load"])

    def on_cpu(self, frame) -> list:
        """The names on ``frame``'s line whose tensors (or module's weights) are on the CPU."""
        try:
            names = ast.walk(ast.parse(self.here([(frame.f_code.co_filename, frame.f_lineno)])[2]))
        except SyntaxError:  # the first line of a statement over several lines
            names = []
        return [n for n in dict.fromkeys(n.id for n in names if isinstance(n, ast.Name)) if _on_cpu(frame.f_locals.get(n))]

    # The stand-ins: DataLoaders that stop after ``batches`` (no workers), datasets without downloads, notes on
    # prints, saves and modules moved, atexit callbacks kept, os._exit that reports first, tensorboard's writer.

    def stand_in(self):
        saver = torch.save  # the pretend GPU's: it writes GPU values as a real GPU's torch.save does
        for owner, name, stand_in in [
                (DataLoader, "__iter__", lambda loader: self.loader_iter(loader)), (builtins, "print", self.print),
                (torch, "save", lambda *args, **kwargs: self.save(saver, *args, **kwargs)), (os, "_exit", self.exit),
                (torch.nn.Module, "to", lambda m, *a, **k: self.module_to(m, *a, **k)),
                (torch.nn.Module, "cuda", lambda m, device=None: self.module_to(m, "cuda")),
                (atexit, "register", lambda func, *a, **k: self.exits.append((func, a, k)) or func)]:
            setattr(owner, name, stand_in)
        sys.meta_path.insert(0, self)
        if importlib.util.find_spec("tensorboard") is None:
            sys.modules["torch.utils.tensorboard"] = types.SimpleNamespace(SummaryWriter=self.writer)

    def loader_iter(self, loader):
        self.result.loops += 1
        if loader.num_workers:
            self.note("rehearse.note.workers")
            loader.num_workers = 0
        for i, batch in enumerate(REAL.iter(loader)):
            if i == self.batches:
                return
            self.result.batches += 1
            yield batch

    def find_spec(self, fullname, path=None, target=None):
        """As a meta path finder: the datasets' stand-ins right after torchvision is imported (it is slow to import:
        only when the script does)."""
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run = spec.loader.exec_module
        spec.loader.exec_module = lambda module: (run(module), self.datasets())
        return spec

    def datasets(self):
        from .datasets import replace_datasets
        replace_datasets(self.batches, self.note)

    def print(self, *args, **kwargs):
        if any(isinstance(a, OnCuda) for a in args):
            self.note("rehearse.note.print", callers())
        return REAL.print(*args, **kwargs)

    def save(self, saver, obj, f, *args, **kwargs):
        if isinstance(obj, torch.nn.Module) and any(isinstance(p, OnCuda) for p in obj.parameters()):
            self.note("rehearse.note.save_model", callers())
        try:
            if isinstance(f, (str, bytes, os.PathLike)):  # torch writes a named file from C++, unseen by the hook
                self.confine("save", f, None, True)
            return saver(obj, f, *args, **kwargs)
        except Confined:  # noted; the script goes on as it would after a save
            return None

    def module_to(self, module, *args, **kwargs):
        moved = REAL.to(module, *args, **kwargs)
        self.in_place.add(self.here()[:2])
        if list(module.parameters()) and all(isinstance(p, OnCuda) for p in module.parameters()):
            self.modules.add(id(module))
            self.result.modules = len(self.modules)
        if isinstance(module, torch.nn.modules.loss._Loss) and not list(module.buffers()):
            self.note("rehearse.note.loss", callers())
        return moved

    def exit(self, code):
        self.ended("rehearse.os_exit", code, self.here())
        REAL.exit(code)

    def writer(self, *args, **kwargs):
        self.note("rehearse.note.tensorboard")
        return mock.MagicMock()  # whatever the script calls on it writes nothing


def _on_cpu(value) -> bool:
    if isinstance(value, torch.nn.Module):
        return any(not isinstance(t, OnCuda) for t in (*value.parameters(), *value.buffers()))
    return isinstance(value, torch.Tensor) and not isinstance(value, OnCuda) and value.dim() > 0


def main():
    """The child's start: the config the rehearsal wrote (its path in argv), then the script, confined."""
    config = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    language.set_language(config["lang"])
    child = Child(config, Path(sys.argv[1]).parent)
    sys.argv, sys.path[0] = [child.file, *config["args"]], os.getcwd()
    with pretend_gpu() as child.gpu:
        child.stand_in()
        sys.addaudithook(child.audit)
        threading.Thread(target=child.watch, daemon=True).start()
        child.run()
    REAL.exit(0)
