"""``python -m tudui rehearse SCRIPT [ARGS...]``: a learner's training script (or notebook) run on a pretend GPU, on any
CPU, in a child process (rehearsal.py) in a scratch copy of its folder, deleted afterwards. The report names the
learner's own line where the script would fail on a real GPU, and the fix in the script's own style. This process
only checks the input, makes the scratch folder, starts the child, relays its output, ends it at --max-seconds and
reports."""
import codecs
import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from .. import text as language
from ..text import say
from .console import UsageError

COPIED = 2**20  # files up to this size are copied into the scratch folder; bigger ones (and big folders) are linked
START = 120  # seconds the child may take to start Python and torch, before --max-seconds counts
BOOT = "import sys; sys.path[0] = {root!r}; from tudui.cli.rehearsal import main; main()"


@dataclass
class Rehearsal:
    """What a rehearsal found: ``passed``, else the learner's ``line`` (``cell`` in a notebook, and its ``code``)
    and the ``error``."""
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
    cell: int | None = None                      # in a notebook: counted from 1 at the top, text cells too


def _source(script) -> tuple:
    """The script's path and its units to run, (file name, cell, text); a UsageError when there is none."""
    path = Path(script)
    try:
        data = path.read_bytes()
    except OSError:
        raise UsageError(say("rehearse.no_file", script=str(script))) from None
    if path.suffix.lower() == ".ipynb":
        return path.resolve(), *_cells(path, data)
    try:  # as Python reads it: a PEP 263 coding line or a BOM, else UTF-8
        text = data.decode(tokenize.detect_encoding(io.BytesIO(data).readline)[0])
        if "\0" in text or text.lstrip()[:1] in ("{", "[") and _json(text) is not None:
            raise ValueError("not Python")
    except (SyntaxError, LookupError, ValueError):
        raise UsageError(say("rehearse.not_python", script=str(script))) from None
    _compile(text, path.name)
    return path.resolve(), [(path.name, None, text)], 0


def _json(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def place(cell, line) -> str:
    """Where in the learner's code: "line 42", or in a notebook "cell 7, line 3"."""
    if line is None:
        return say("rehearse.place.none")
    return say("rehearse.place.cell", cell=cell, line=line) if cell else say("rehearse.place.line", line=line)


def _compile(text, name, cell=None):
    try:
        compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise UsageError(say("rehearse.syntax", script=name, place=place(cell, exc.lineno), message=exc.msg)) from None
    except ValueError:  # a null byte
        raise UsageError(say("rehearse.not_python", script=name)) from None


def _cells(path, data) -> tuple:
    """A notebook's code cells, IPython's magics and shell lines left out (each a ``pass``), and how many were."""
    notebook = _json(data.decode("utf-8", "replace"))
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise UsageError(say("rehearse.not_notebook", script=path.name))
    units, skipped = [], 0
    for n, cell in enumerate(notebook["cells"], 1):
        source = cell.get("source", "") if isinstance(cell, dict) and cell.get("cell_type") == "code" else None
        source = "".join(source) if isinstance(source, list) else source
        if not isinstance(source, str) or source.lstrip().startswith("%%"):
            skipped += isinstance(source, str)
            continue
        source, magics = re.subn(r"(?m)^([^\S\n]*)[%!].*", r"\1pass", source)  # a magic or shell line: a pass
        units.append((f"<cell {n}>", n, source))
        _compile(source, path.name, n)
        skipped += magics
    return units, skipped


def _copy(script: Path, work: Path) -> dict:
    """work/ as a copy of the script's folder (small files copied, big files and folders linked: a write through a
    link lands outside, so it is stopped); what is in it, {path: (size, mtime)}."""
    work.mkdir()
    budget = COPIED * 64  # bytes copied in all; the rest is linked
    for entry in sorted(os.scandir(script.parent), key=lambda e: e.name != script.name):  # the script first
        try:
            size = entry.stat().st_size if entry.is_file(follow_symlinks=False) else None
            if size is not None and size <= min(COPIED, budget):
                shutil.copy2(entry.path, work / entry.name)
                budget -= size
            elif entry.is_dir(follow_symlinks=False) and budget > COPIED * 8 and _small(entry.path):
                shutil.copytree(entry.path, work / entry.name, symlinks=True)
                budget -= COPIED * 8
            else:
                os.symlink(entry.path, work / entry.name, target_is_directory=entry.is_dir())
        except OSError:  # unreadable, or no right to make links (Windows): left out
            continue
    return _files(work)


def _small(folder, files=200) -> bool:
    """At most ``files`` files (their sizes checked when copied: up to ``COPIED`` in all), in ``folder`` and below."""
    size = 0
    for root, _, names in os.walk(folder):
        files -= len(names)
        size += sum(os.lstat(os.path.join(root, name)).st_size for name in names)
        if files < 0 or size > COPIED * 8:
            return False
    return True


def _files(work: Path) -> dict:
    paths = [os.path.join(root, name) for root, _, names in os.walk(work) for name in names]
    return {os.path.relpath(path, work): (seen.st_size, seen.st_mtime_ns) for path in paths
            for seen in [os.lstat(path)]}


def rehearse(script, *args, batches: int = 2, max_seconds: float = 120, lang: str | None = None,
             quiet: bool = False) -> Rehearsal:
    """Run ``script`` (a .py file or a notebook, with ``args`` in sys.argv) on a pretend GPU in a child process and
    print the report in ``lang`` (default: the language in force); returns a :class:`Rehearsal` to inspect."""
    chosen, start = list(language._chosen), time.perf_counter()
    language.set_language(lang or language.language())
    try:
        path, units, skipped = _source(script)
        if not quiet:
            print(say("rehearse.start", script=path.name, batches=batches, seconds=max_seconds))
        scratch = Path(tempfile.mkdtemp(prefix="tudui-rehearse-"))
        try:
            before = _copy(path, scratch / "work")
            config = {"name": path.name, "units": units, "args": list(map(str, args)), "batches": batches,
                      "lang": language.language(), "notebook": path.suffix.lower() == ".ipynb",
                      "notes": [say("rehearse.note.magics", n=skipped)] if skipped else []}
            result = _child(scratch, config, max_seconds)
            result.saved = sorted(name for name, seen in _files(scratch / "work").items() if before.get(name) != seen)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result.seconds = time.perf_counter() - start
        if not quiet:
            print(report(result))
        return result
    finally:
        language._chosen[:] = chosen


def _child(scratch: Path, config: dict, max_seconds: float) -> Rehearsal:
    """The child process (its temp folder scratch/tmp, its progress file scratch/progress.jsonl), started, relayed
    and ended; what it found (its last line of progress if it did not finish)."""
    tmp, progress = scratch / "tmp", scratch / "progress.jsonl"
    tmp.mkdir()
    progress.touch()
    (scratch / "config.json").write_text(json.dumps(config), encoding="utf-8")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8",
           "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp), "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
           "MPLCONFIGDIR": str(tmp / "mpl")}
    boot = BOOT.format(root=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-c", boot, str(scratch / "config.json")], cwd=scratch / "work", env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=sys.platform != "win32",
                            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
    pumps = [threading.Thread(target=_pump, args=pair, daemon=True) for pair in ((proc.stdout, sys.stdout),
                                                                                (proc.stderr, sys.stderr))]
    for pump in pumps:
        pump.start()
    try:
        timed_out = _wait(proc, progress, max_seconds)
    finally:
        _kill(proc)
    for pump in pumps:  # the rest of the child's output (its pipes close with it)
        pump.join(timeout=5)
    return _outcome(config["name"], progress, proc.returncode, timed_out, max_seconds)


def _wait(proc, progress: Path, max_seconds: float) -> bool:
    """Until the child ends; True if --max-seconds ended it. --max-seconds counts from the script's first line (the
    child's first line of progress)."""
    deadline, started = time.monotonic() + START + max_seconds, False
    while proc.poll() is None:
        if not started and progress.stat().st_size:
            started, deadline = True, time.monotonic() + max_seconds
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def _pump(stream, to):
    """The child's output, printed here (so a notebook cell shows it) as it comes."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    with stream:
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            to.write(decoder.decode(chunk))
            to.flush()


def _kill(proc):
    """The child and whatever it started, ended."""
    if sys.platform == "win32":  # no process groups: the child, started with CREATE_NEW_PROCESS_GROUP
        proc.kill()
    else:
        with contextlib.suppress(OSError):  # already gone
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _outcome(name, progress: Path, code, timed_out, max_seconds) -> Rehearsal:
    """The child's last line of progress: its result if it finished (passed, or an error), else how far it got."""
    lines = progress.read_text(encoding="utf-8", errors="replace").splitlines()
    result = Rehearsal(**{"script": name, **next((s for s in map(_json, reversed(lines)) if isinstance(s, dict)), {})})
    if timed_out or not (result.passed or result.error):
        how = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else code
        result.passed, result.error = False, say("rehearse.timeout" if timed_out else "rehearse.died", how=how,
                                                 seconds=max_seconds, loops=result.loops, batches=result.batches)
    return result


def report(result: Rehearsal) -> str:
    """The report: passed or where it failed and the fix; the notes; what a rehearsal cannot know."""
    if result.passed:
        lines = [say("rehearse.passed", loops=result.loops, batches=result.batches, tensors=result.tensors,
                     modules=result.modules, syncs=result.syncs)]
    else:
        lines = [say("rehearse.failed", error=result.error)]
        if result.line:
            lines.append(say("rehearse.where", script=result.script, place=place(result.cell, result.line),
                             code=result.code or ""))
            lines += [say("rehearse.cells")] if result.cell else []
        lines += [result.fix] if result.fix else []
    lines += [say("rehearse.notes")] + [f"  - {note}" for note in result.notes] if result.notes else []
    if result.saved:
        lines.append(say("rehearse.saved", files=", ".join(result.saved[:6]), n=len(result.saved)))
    lines.append(say("rehearse.limits"))
    return "\n".join(lines)


def run(args) -> int:
    """The command: exit 0 when the rehearsal passed, 1 when the script failed, was stopped or ended itself."""
    result = rehearse(args.script, *args.args, batches=args.batches, max_seconds=args.max_seconds, lang=args.lang)
    print(say("rehearse.took", seconds=result.seconds))
    return 0 if result.passed else 1
