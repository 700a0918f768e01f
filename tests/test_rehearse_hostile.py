"""python -m tudui rehearse on hostile but ordinary scripts: whatever the script does, the rehearsal exits 0, 1 or 2
with one report, ends within --max-seconds plus 5 s, leaves no scratch folder behind, and nothing outside its scratch
folder changes (a canary folder, the script's folder and the home folder are listed and hashed before and after)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tudui.cli import main

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def snapshot(root: Path) -> dict:
    """Every file, folder and link under ``root`` (the temp folder left out), with its bytes' hash."""
    seen = {}
    for path in sorted(root.rglob("*")):
        if path.relative_to(root).parts[0] == "tmp":
            continue
        seen[str(path.relative_to(root))] = os.readlink(path) if path.is_symlink() else hashlib.sha256(
            path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return seen


@pytest.fixture
def world(tmp_path, monkeypatch):
    """code/ (the script, a sibling file, a big data folder that is linked, not copied), canary/, a fake home; the
    rehearsal's temp folder in tmp/. ``run(text, *options)`` rehearses ``text`` as code/train.py."""
    for folder in ("code/data", "canary", "home", "tmp"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "code" / "notes.txt").write_text("mine\n")
    for i in range(250):
        (tmp_path / "code" / "data" / f"{i}.bin").write_bytes(bytes([i % 256]) * 10)
    (tmp_path / "canary" / "keep.txt").write_text("canary\n")
    (tmp_path / "home" / ".bashrc").write_text("# home\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    before = snapshot(tmp_path)

    def run(text, *options, name="train.py", data=None, max_seconds="20"):
        script = tmp_path / "code" / name
        script.write_bytes(data if data is not None else textwrap.dedent(text).encode())
        before[f"code/{name}"] = snapshot(tmp_path)[f"code/{name}"]
        start = time.perf_counter()
        code = main(["rehearse", "--batches", "1", "--max-seconds", max_seconds, *options, str(script)])
        return code, time.perf_counter() - start

    run.tmp = tmp_path
    yield run
    assert snapshot(tmp_path) == before, "something outside the scratch folder changed"
    assert not list((tmp_path / "tmp").glob("tudui-rehearse-*")), "a scratch folder was left behind"


def rehearsed(capsys, run, text, *options, **kwargs):
    """Exit code, stdout and stderr; exactly one report, and an exit code of 0, 1 or 2."""
    code, seconds = run(text, *options, **kwargs)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2)
    if code != 2:
        reports = out.count("Rehearsal passed") + out.count("Rehearsal failed")
        assert out.count("A rehearsal cannot show") == 1 and reports == 1, out
    return code, out, err, seconds


CANARY = "os.path.join(os.environ['HOME'], '..', 'canary', 'keep.txt')"
FILES = {  # (the script, exit code, what the report says)
    "write-through-__file__": ("open(os.path.join(os.path.dirname(__file__), 'notes.txt'), 'w').write('x')\n", 0, ""),
    "delete-a-sibling": ("os.remove(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'notes.txt'))\n", 0, ""),
    "chdir-to-its-folder-and-save": ("os.chdir(os.path.dirname(__file__))\ntorch.save({'w': 1}, 'model.pth')\n", 0,
                                     "model.pth"),
    "chdir-home-and-save": ("os.chdir(os.path.expanduser('~'))\ntorch.save({'w': 1}, 'model.pth')\nprint('went on')\n",
                            0, "line 4 saves to"),
    "absolute-save": ("torch.save({'w': 1}, os.path.join(os.environ['HOME'], 'autodl-tmp-model.pth'))\n", 0,
                      "line 3 saves to"),
    "up-and-out": ("open('../../../x', 'w').write('x')\n", 1, "line 3 writes to"),
    "delete-outside": (f"os.remove({CANARY})\n", 1, "line 3 removes"),
    "rename-outside": (f"os.replace({CANARY}, {CANARY} + '.old')\n", 1, "line 3 renames or moves"),
    "rmtree-outside": (f"import shutil\nshutil.rmtree(os.path.dirname({CANARY}))\n", 1, "line 4 removes"),
    "mkdir-in-home": ("os.makedirs(os.path.expanduser('~/runs/1'))\n", 1, "creates"),
    "write-through-a-linked-folder": ("open('data/new.bin', 'wb').write(b'x')\n", 1, "line 3 writes to"),
    "chmod-outside": (f"os.chmod({CANARY}, 0o600)\n", 1, "line 3 changes"),
}


@pytest.mark.parametrize("body, code, said", FILES.values(), ids=FILES)
def test_files_outside_the_scratch_folder_do_not_change(capsys, world, body, code, said):
    got, out, err, _ = rehearsed(capsys, world, "import os\nimport torch\n" + body)
    assert (got, err) == (code, "") and said in out
    assert "went on" in out or "went on" not in body


HANGS = {
    "sleep": "import time\ntime.sleep(10**6)\n",
    "sigint-ignored": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n",
    "lock-never-released": "import threading\nlock = threading.Lock()\nlock.acquire()\nlock.acquire()\n",
    "non-daemon-thread": "import threading, time\nthreading.Thread(target=lambda: time.sleep(10**6)).start()\n",
}


STARTING = []  # seconds a rehearsal of an empty script takes: starting Python and torch, which --max-seconds leaves out


@pytest.mark.parametrize("body", HANGS.values(), ids=HANGS)
def test_max_seconds_ends_a_hang(capsys, world, body):
    if not STARTING:
        STARTING.append(rehearsed(capsys, world, "pass\n")[3])
    code, out, _, seconds = rehearsed(capsys, world, body, max_seconds="1")
    assert code == 1 and "stopped after 1 s (--max-seconds), after 0 DataLoader loop(s)" in out
    assert seconds - STARTING[0] < 1 + 5, f"ended {seconds - STARTING[0]:.1f} s after the script started"
    assert f"line {len(body.splitlines())}:" in out or "line 3:" in out  # the line it hung at (a thread's, or main's)


EXITS = {
    "os._exit(0)": ("import os\nprint('bye')\nos._exit(0)\n", 0, "Rehearsal passed"),
    "os._exit(3)": ("import os\nos._exit(3)\n", 1, "os._exit(3)"),
    "kill-itself": ("import os\nos.kill(os.getpid(), 9)\n", 1, "signal 9"),
    "atexit-os._exit": ("import atexit, os\natexit.register(lambda: os._exit(7))\n", 1, "os._exit(7)"),
}


@pytest.mark.parametrize("body, code, said", EXITS.values(), ids=EXITS)
def test_the_script_does_not_own_the_exit(capsys, world, body, code, said):
    got, out, err, _ = rehearsed(capsys, world, body)
    assert (got, err) == (code, "") and said in out


TRACEBACKS = {
    "base-exception": ("class Stop(BaseException):\n    pass\n\nraise Stop('halt')\n", "Stop: halt", 4),
    "generator-exit": ("x = 1\nraise GeneratorExit\n", "GeneratorExit", 2),
    "bad-__str__": ("class Odd(Exception):\n    def __str__(self):\n        raise ValueError\n\nraise Odd()\n",
                    "Odd: (no message", 5),
    "atexit-raises": ("import atexit\n\ndef done():\n    raise ValueError('late')\n\natexit.register(done)\n",
                      "ValueError: late", 4),
}


@pytest.mark.parametrize("body, said, line", TRACEBACKS.values(), ids=TRACEBACKS)
def test_the_scripts_own_exceptions_are_its_error_at_its_line(capsys, world, body, said, line):
    code, out, err, _ = rehearsed(capsys, world, body)
    assert (code, err) == (1, "") and f"Rehearsal failed: {said}" in out and f"line {line}:" in out
    assert "Traceback" not in out


ENCODINGS = {
    "latin-1-with-coding-line": "# -*- coding: latin-1 -*-\nprint('caf\xe9')\n".encode("latin-1"),
    "utf-8-bom": "\ufeffprint('café')\n".encode("utf-8"),
    "crlf": b"x = 1\r\nif x:\r\n    print('caf\xc3\xa9')\r\n",
}


@pytest.mark.parametrize("data", ENCODINGS.values(), ids=ENCODINGS)
def test_any_file_python_runs_the_rehearsal_runs(capsys, world, data):
    code, out, err, _ = rehearsed(capsys, world, "", data=data)
    assert (code, err) == (0, "") and "café" in out


@pytest.mark.parametrize("name, data", [("train.py", b'{"cells": []}\n'), ("x.ipynb", b'{"a": [1, 2]}\n'),
                                        ("train.py", bytes(range(256))), ("x.ipynb", b"\x89PNG\0\0")])
def test_json_and_binary_files_are_one_line_and_exit_2(capsys, world, name, data):
    code, out, err, _ = rehearsed(capsys, world, "", name=name, data=data)
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and name in err


@pytest.mark.parametrize("call", ["os.system('touch ' + {c})", "subprocess.run(['touch', {c}])"],
                         ids=["os.system", "subprocess.run"])
def test_a_program_is_not_started(capsys, world, call):
    body = "import os, subprocess\n" + call.format(c=CANARY + " + '.new'") + "\n"
    code, out, err, _ = rehearsed(capsys, world, body)
    assert (code, err) == (1, "") and "line 2 starts a program (" in out and "exit code 1" in out


def test_a_script_that_closes_its_stdout_harms_nothing(capsys, world):
    code, out, err, _ = rehearsed(capsys, world, "import os, sys\nprint('first')\nsys.stdout.close()\nos.close(1)\n")
    assert (code, err) == (0, "") and "first" in out


def notebook(*cells) -> bytes:
    return json.dumps({"cells": [{"cell_type": kind, "source": source, "metadata": {}, **(
        {"outputs": [], "execution_count": None} if kind == "code" else {})} for kind, source in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def test_a_notebook_runs_its_code_cells_and_names_the_cell_and_line(capsys, world):
    script = (SCRIPTS / "train_gpu_1.py").read_text(encoding="utf-8")
    head, loop = script.split("for i in range(epoch):")
    broken = ("for i in range(epoch):" + loop).replace("targets = targets.cuda()\n", "pass\n", 1)
    cells = [("markdown", "# Training"), ("code", "%matplotlib inline\n" + head), ("markdown", "The loop"),
             ("code", "!nvidia-smi\n" + broken)]
    code, out, err, _ = rehearsed(capsys, world, "", name="lesson.ipynb", data=notebook(*cells))
    line = 1 + broken.splitlines().index("        loss = loss_fn(outputs, targets)") + 1
    assert (code, err) == (1, "") and f"lesson.ipynb, cell 4, line {line}: loss = loss_fn(outputs, targets)" in out
    assert "targets = targets.cuda()" in out and "2 IPython magic or shell line(s)" in out
    assert "text cells too" in out
