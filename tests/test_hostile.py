"""Hostile input through the CLI and the API: one line on stderr, the right exit code, nothing changed, nothing run.

Most cases call ``cli.main`` in this process (fast); a few run ``python -m tudui`` for real (Ctrl-C, a bug's
traceback, a training killed with SIGKILL and resumed).
"""
import datetime
import io
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import warnings
import zipfile
import zlib
from unittest import mock

import filelock
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from tudui import CheckpointError, DeviceError, Tudui, load_model, pick_device, read_checkpoint, save_checkpoint
from tudui.checkpoint import temp_prefix
from tudui import data, distributed, loops
from tudui import screening as boundary
from tudui.cli import main
from tudui.cli.training import workers_note
from helpers import course_tudui_class, fails_in_one_line, registered, state_equal

TRAIN = ["train", "--device", "cpu", "--limit", "32", "--batch-size", "16", "--no-progress"]
SUBPROCESS_TIMEOUT = 120


def lock_is_free(path):
    lock = filelock.FileLock(path, timeout=0)
    with lock:
        return True


def snapshot(folder):
    """Every file under ``folder`` with its bytes (links as their target), to prove nothing changed.
    Empty lock files are left out: a lock file stays beside its checkpoint (the lock is held on it)."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if name.endswith(".lock") and not os.path.islink(path) and os.path.getsize(path) == 0:
                continue
            files[path] = os.readlink(path) if os.path.islink(path) else open(path, "rb").read()
    return files


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A checkpoint of ``TRAIN --epochs 1`` (bytes), and a PNG."""
    folder = tmp_path_factory.mktemp("good")
    with mock.patch.dict(os.environ, {"TUDUI_DATA": "synthetic"}):
        assert main(TRAIN + ["--epochs", "1", "--checkpoint", str(folder / "ck.pth")]) == 0
    Image.new("RGB", (32, 32), (10, 200, 30)).save(folder / "x.png")
    return folder / "ck.pth", folder / "x.png"


@pytest.fixture
def here(tmp_path, monkeypatch, good):
    """Work in a fresh folder holding a copy of the good checkpoint (ck.pth) and image (x.png)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck.pth").write_bytes(good[0].read_bytes())
    (tmp_path / "x.png").write_bytes(good[1].read_bytes())
    return tmp_path


# --- arguments ------------------------------------------------------------------------------------

@pytest.mark.parametrize("option, value", [
    ("--epochs", "0"), ("--epochs", "-1"), ("--epochs", "two"), ("--epochs", "1.5"), ("--epochs", "10001"),
    ("--epochs", "99999999999999999999"),
    ("--batch-size", "0"), ("--batch-size", "-4"), ("--batch-size", "9223372036854775808"), ("--batch-size", ""),
    ("--batch-size", "65537"),
    ("--lr", "0"), ("--lr", "-1"), ("--lr", "nan"), ("--lr", "inf"), ("--lr", "-inf"), ("--lr", "1e309"),
    ("--lr", "abc"), ("--lr", "1e4"),
    ("--seed", "-1"), ("--seed", "18446744073709551616"), ("--seed", str(2**63)), ("--seed", "abc"),
    ("--limit", "0"), ("--limit", "-5"), ("--limit", "1000000000000"), ("--limit", "50001"),
    ("--data", "nope"), ("--loader", "magic"),
])
def test_out_of_range_arguments(capsys, here, option, value):
    before = snapshot(here)
    line = fails_in_one_line(capsys, ["train", "--force", option, value])
    assert option in line
    assert snapshot(here) == before


@pytest.mark.parametrize("argv, says", [
    ([], "required"), (["fly"], "'fly'"), (["train", "--no-such-option"], "--no-such-option"),
    (["predict"], "required"), (["predict", "x.png"], "required"), (["train", "--epochs"], "expected one argument"),
])
def test_malformed_command_lines(capsys, here, argv, says):
    line = fails_in_one_line(capsys, argv)
    assert "--help" in line and says in line


# --- devices --------------------------------------------------------------------------------------

@pytest.mark.parametrize("want", ["gpu", "meta", "cuda:99999999999999999999", "cuda:256", "cuda:-1", "cuda:x",
                                  "cpu:1", "", "tpu", "mps:1", "cuda:0:0", "cuda\x00", "mps", "xpu"]
                         + (["cuda", "cuda:0"] if not torch.cuda.is_available() else []))
def test_devices_that_are_not_there(capsys, here, want):
    before = snapshot(here)
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--force", "--device", want])
    assert "device" in line or "cannot use" in line
    assert snapshot(here) == before


@pytest.mark.parametrize("want", ["gpu", "meta", torch.device("meta"), "cuda:256"])
def test_api_refuses_devices_naming_the_choices(here, want):
    for call in (lambda: pick_device(want), lambda: load_model("ck.pth", device=want)):
        with pytest.raises(DeviceError, match="choose one of|does not exist|cannot use"):
            call()


# --- where the checkpoint goes ---------------------------------------------------------------------

@pytest.mark.parametrize("target, says", [
    ("", "names no file"), (".", "a folder"), ("/", "names no file"), ("sub", "a folder"), ("newfolder/", "names no file"),
    ("missing/ck.pth", "does not exist"), ("x" * 300 + ".pth", "too long"), ("/dev/null", "not a regular file"),
    ("link-to-null.pth", "not a regular file"), ("link-to-dir.pth", "a folder"), ("nul\x00.pth", "not usable"),
    ("ck.pth", "--force"),
])
def test_checkpoint_paths_are_checked_before_training(capsys, here, target, says):
    (here / "sub").mkdir()
    (here / "link-to-null.pth").symlink_to("/dev/null")
    (here / "link-to-dir.pth").symlink_to(here / "sub")
    before = snapshot(here)
    with mock.patch("tudui.loops.fit", side_effect=AssertionError("trained")):
        line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--checkpoint", target])
    assert says in line
    assert snapshot(here) == before


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="root writes into read-only folders; Windows has no mode 0o555 folders")
def test_read_only_folder(capsys, here):
    (here / "ro").mkdir(mode=0o555)
    assert "cannot write" in fails_in_one_line(capsys, TRAIN + ["--checkpoint", "ro/ck.pth"])


@pytest.mark.parametrize("target", ["/dev/null", "sub", "", "link-to-null.pth"])
def test_save_checkpoint_refuses_what_is_not_a_regular_file(here, target):
    (here / "sub").mkdir()
    (here / "link-to-null.pth").symlink_to("/dev/null")
    with pytest.raises(CheckpointError):
        save_checkpoint(target, Tudui(), epoch=1)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


HOLD_LOCK = ("import sys, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
             "sys.stdin.read()")


def holding_the_lock(path):
    """Another process that holds ``path`` as a training does (until it ends)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_running_training_holds_the_path(capsys, here):
    with holding_the_lock(here / "ck.pth.lock") as other:
        before = snapshot(here)
        line = fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"])
        assert "another training" in line and "ck.pth.lock" in line
        assert snapshot(here) == before
        other.kill()


def test_a_killed_trainings_lock_and_temp_files_are_cleaned_up(capsys, here):
    other = holding_the_lock(here / "ck.pth.lock")
    other.kill()  # SIGKILL: the system releases its lock
    other.wait(timeout=SUBPROCESS_TIMEOUT)
    ours = temp_prefix(here / "ck.pth") + "k1ll3d.tmp"
    (here / ours).write_bytes(b"half a save")
    (here / ".tmp-ck.pth-notes.pth").write_bytes(b"a file of the user's own")
    (here / (temp_prefix(here / "other.pth") + "k1ll3d.tmp")).write_bytes(b"another checkpoint's")
    assert main(TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"]) == 0
    assert ours not in os.listdir(here) and ".tmp-ck.pth-notes.pth" in os.listdir(here)
    assert len(os.listdir(here)) == 5  # ck.pth, its lock, x.png, and the two files that are not ours
    assert read_checkpoint("ck.pth")["epoch"] == 2


# --- resuming with other settings --------------------------------------------------------------------

@pytest.mark.parametrize("change, says", [
    (["--lr", "5"], "--lr 0.01 (not 5.0)"), (["--seed", "3"], "--seed 0 (not 3)"),
    (["--limit", "16"], "--limit 32 (not 16)"), (["--batch-size", "8"], "--batch-size 16 (not 8)"),
    (["--loader", "resident"], "--loader dataloader (not resident)"),
])
def test_resume_with_other_settings_is_refused(capsys, here, change, says):
    before = snapshot(here)
    argv = TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"]
    i = argv.index(change[0]) if change[0] in argv else len(argv)
    argv[i:i + 2] = change
    line = fails_in_one_line(capsys, argv)
    assert says in line and "--force" in line
    assert snapshot(here) == before


def test_resume_with_another_data_source_is_refused(capsys, here, good):
    state = tampered(good[0])
    state["extra"]["args"]["data"] = "cifar10"  # as if trained on the real CIFAR-10
    torch.save(state, here / "real.pth")
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "real.pth"])
    assert "--data cifar10 (not synthetic)" in line


# --- hostile checkpoint files --------------------------------------------------------------------------

class Payload:
    """Runs ``call(*args)`` when unpickled by an unsafe loader."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def tampered(good, **changes):
    """Our checkpoint with some entries replaced (None deletes the entry)."""
    state = torch.load(good, weights_only=True)
    for key, value in changes.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    return state


def adam_state():
    model = Tudui()
    opt = torch.optim.Adam(model.parameters())
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    opt.step()
    return opt.state_dict()


def sgd_state(**edit):
    state = torch.load(os.path.join(os.getcwd(), "ck.pth"), weights_only=True)["optimizer"]
    state.update(edit)
    return state


def sparse_weights():
    weights = Tudui().state_dict()
    weights["model.8.bias"] = weights["model.8.bias"].to_sparse()
    return weights


def write_malicious(kind, path, marker):
    touch = Payload(os.system, f"touch {marker}")
    exec_ = Payload(exec, f"open({str(marker)!r}, 'w').close()")
    if kind == "raw-protocol-0":
        path.write_bytes(pickle.dumps(touch, protocol=0))
    elif kind == "raw-protocol-2":
        path.write_bytes(pickle.dumps(exec_, protocol=2))
    elif kind == "torch.save-system":
        torch.save(touch, path)
    elif kind == "torch.save-exec":
        torch.save(exec_, path)
    elif kind == "nested-in-extra":
        torch.save({"format": "tudui-checkpoint", "model": Tudui().state_dict(), "extra": {"a": [{"b": touch}]}}, path)
    elif kind == "nested-in-weights":
        torch.save({**Tudui().state_dict(), "model.0.weight": exec_}, path)
    elif kind == "eval-in-epoch":
        torch.save({"format": "tudui-checkpoint", "model": Tudui().state_dict(),
                    "epoch": Payload(eval, f"__import__('os').system('touch {marker}')")}, path)


MALICIOUS = ["raw-protocol-0", "raw-protocol-2", "torch.save-system", "torch.save-exec", "nested-in-extra",
             "nested-in-weights", "eval-in-epoch"]


@pytest.mark.parametrize("command", ["predict", "resume"])
@pytest.mark.parametrize("kind", MALICIOUS)
def test_malicious_pickles_never_run(capsys, here, kind, command):
    marker = here / "pwned"
    write_malicious(kind, here / "evil.pth", marker)
    before = snapshot(here)
    argv = (["predict", "--checkpoint", "evil.pth", "x.png"] if command == "predict"
            else TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "evil.pth"])
    line = fails_in_one_line(capsys, argv)
    assert "refused" in line or "not a readable PyTorch checkpoint" in line
    assert not marker.exists()
    assert snapshot(here) == before


def damaged(good):
    data = good.read_bytes()
    return {
        "empty": b"", "text": b"hello\n" * 10, "html": b"<!DOCTYPE html><html>Sign in</html>",
        "binary": bytes(range(256)) * 4, "truncated-half": data[: len(data) // 2],
        "truncated-end": data[:-100], "zeroed-middle": data[:2000] + bytes(4000) + data[6000:],
    }


@pytest.mark.parametrize("name", ["empty", "text", "html", "binary", "truncated-half", "truncated-end",
                                  "zeroed-middle"])
def test_damaged_files(capsys, here, good, name):
    (here / "bad.pth").write_bytes(damaged(good[0])[name])
    line = fails_in_one_line(capsys, ["predict", "--checkpoint", "bad.pth", "x.png"])
    assert "bad.pth" in line


STRUCTURES = {
    "no-model": dict(model=None),
    "model-not-a-dict": dict(model=[1, 2]),
    "non-tensor-weights": dict(model={k: 1.0 for k in Tudui().state_dict()}),
    "integer-weights": dict(model={k: v.long() for k, v in Tudui().state_dict().items()}),
    "sparse-weights": dict(model=sparse_weights()),
    "wrong-shape": dict(model={**Tudui().state_dict(), "model.7.weight": torch.zeros(64, 512)}),
    "resnet18": dict(model={f"layer{i}.weight": torch.zeros(1) for i in range(200)}),
    "epoch-text": dict(epoch="abc"),
    "epoch-negative": dict(epoch=-1),
    "epoch-bool": dict(epoch=True),
    "epoch-huge": dict(epoch=10**30),
    "rng-short": dict(rng=torch.zeros(5, dtype=torch.uint8)),
    "rng-invalid": dict(rng=torch.zeros(5056, dtype=torch.uint8)),
    "rng-float": dict(rng=torch.zeros(5056)),
    "rng-text": dict(rng="seed"),
    "adam-into-sgd": dict(optimizer=adam_state()),
    "no-optimizer": dict(optimizer=None),
    "optimizer-not-a-dict": dict(optimizer=[1]),
    "two-param-groups": dict(optimizer="two-groups"),
    "state-of-wrong-shape": dict(optimizer="wrong-shape"),
    "lr-nan": dict(optimizer="lr-nan"),
    **{f"group-{name}": dict(optimizer=name) for name in [
        "momentum-nan", "maximize", "weight-decay-huge", "foreach-yes", "weight-decay-text", "lr-inf", "lr-negative",
        "lr-int", "params-repeated", "params-text", "extra-group-key", "group-key-int"]},
    **{f"state-{name}": dict(optimizer=name) for name in [
        "buffer-number", "buffer-0-dim", "buffer-nan", "buffer-int", "buffer-shadowing-parameter", "index-99",
        "index-text", "entry-key-int"]},
    "weights-nan": dict(model="nan"),
    "weights-inf": dict(model="inf"),
    "weights-shadowing-parameter": dict(model="shadowing"),
    "extra-not-a-dict": dict(extra=[1]),
}


def shadowing(value):
    """A Parameter whose instance dict hides a method: loaded code that called it would call the file's value."""
    param = nn.Parameter(value)
    param.is_floating_point = "shadowed"
    return param


GROUP_EDITS = {"momentum-nan": ("momentum", float("nan")), "maximize": ("maximize", True),
               "weight-decay-huge": ("weight_decay", 1e30), "foreach-yes": ("foreach", "yes"),
               "weight-decay-text": ("weight_decay", "abc"), "lr-inf": ("lr", float("inf")),
               "lr-negative": ("lr", -0.01), "lr-int": ("lr", 1), "params-repeated": ("params", [0] * 10),
               "params-text": ("params", "0123456789"), "extra-group-key": ("betas", (0.9, 0.99)),
               "group-key-int": (7, 7)}
STATE_EDITS = {"buffer-number": {0: {"momentum_buffer": 5}}, "buffer-0-dim": {9: {"momentum_buffer": torch.tensor(0.)}},
               "buffer-nan": {9: {"momentum_buffer": torch.full((10,), float("nan"))}},
               "buffer-int": {9: {"momentum_buffer": torch.zeros(10, dtype=torch.long)}},
               "buffer-shadowing-parameter": {9: {"momentum_buffer": shadowing(torch.zeros(10))}},
               "index-99": {99: {"momentum_buffer": None}}, "index-text": {"0": {"momentum_buffer": None}},
               "entry-key-int": {9: {1: torch.zeros(10)}}}


def weights_edit(name):
    weights = Tudui().state_dict()
    weights["model.8.bias"] = (shadowing(weights["model.8.bias"]) if name == "shadowing"
                               else torch.full((10,), float(name)))
    return weights


def optimizer_edit(name):
    state = sgd_state()
    if name in GROUP_EDITS:
        key, value = GROUP_EDITS[name]
        state["param_groups"][0][key] = value
    elif name in STATE_EDITS:
        state["state"] = STATE_EDITS[name]
    elif name == "two-groups":
        state["param_groups"] = [dict(state["param_groups"][0], params=[0, 1]),
                                 dict(state["param_groups"][0], params=list(range(2, 10)))]
    elif name == "wrong-shape":
        state["state"] = {0: {"momentum_buffer": torch.zeros(3)}}
    elif name == "lr-nan":
        state["param_groups"][0]["lr"] = float("nan")
    return state


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_wrong_structures_are_refused_before_anything_is_applied(capsys, here, good, name):
    changes = dict(STRUCTURES[name])
    if isinstance(changes.get("optimizer"), str):
        changes["optimizer"] = optimizer_edit(changes["optimizer"])
    if isinstance(changes.get("model"), str):
        changes["model"] = weights_edit(changes["model"])
    torch.save(tampered(good[0], **changes), here / "bad.pth")
    before = snapshot(here)
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "bad.pth"])
    assert "bad.pth" in line
    assert snapshot(here) == before


@pytest.mark.parametrize("obj", [[1, 2, 3], {}, {"lr": 0.1}, torch.zeros(3), "text", 42, None])
def test_foreign_objects(capsys, here, obj):
    torch.save(obj, here / "foreign.pth")
    assert "not a Tudui checkpoint" in fails_in_one_line(capsys, ["predict", "--checkpoint", "foreign.pth", "x.png"])


def test_a_directory_as_checkpoint(capsys, here):
    (here / "dir.pth").mkdir()
    assert "is a folder" in fails_in_one_line(capsys, ["predict", "--checkpoint", "dir.pth", "x.png"])


def test_many_class_names_are_read_in_one_pass(capsys, here):
    """1,600 ``<module>.Tudui`` names once made the loader re-read the file for each name."""
    objects = []
    for i in range(1600):
        cls = type("Tudui", (), {"__module__": f"m{i}"})
        sys.modules[f"m{i}"] = mock.Mock(Tudui=cls)
        objects.append(cls())
    try:
        torch.save(objects, here / "many.pth")
    finally:
        for i in range(1600):
            del sys.modules[f"m{i}"]
    scans = mock.patch("torch.serialization.get_unsafe_globals_in_checkpoint",
                       wraps=torch.serialization.get_unsafe_globals_in_checkpoint)
    loads = mock.patch("torch.load", wraps=torch.load)
    with scans as scan, loads as load:
        assert "not a Tudui checkpoint" in fails_in_one_line(capsys, ["predict", "--checkpoint", "many.pth", "x.png"])
    assert (scan.call_count, load.call_count) == (1, 1)  # one pass over the names, one load


def course_model(course_tudui_class, edit):
    torch.manual_seed(0)
    model = course_tudui_class("model")()
    edit(model)
    return model


@pytest.mark.parametrize("edit, loads", [
    (lambda m: m.__dict__.update(state_dict="shadowed", forward="shadowed"), True),
    (lambda m: m.__dict__.update(_modules=None), False),
    (lambda m: m.__dict__.update(_modules={"model": None}), False),
    (lambda m: m.model.__dict__.update(_modules={"0": nn.ReLU()}), False),
    (lambda m: m.model[0].__dict__.update(_parameters={"weight": "text"}), False),
], ids=["shadowed-methods", "modules-none", "model-none", "relu-layer", "text-parameter"])
def test_course_pickles_are_read_without_calling_their_methods(capsys, here, edit, loads):
    model = course_model(course_tudui_class, edit)
    with registered(type(model), "model"):
        torch.save(model, here / "tudui_9.pth")
    argv = ["predict", "--checkpoint", "tudui_9.pth", "x.png"]
    if loads:
        assert main(argv) == 0
        assert capsys.readouterr().out.startswith("x.png: ")
    else:
        assert "tudui_9.pth" in fails_in_one_line(capsys, argv)


# --- images -----------------------------------------------------------------------------------------

def png_claiming(width, height):
    """A tiny PNG whose header claims width x height pixels (a decompression bomb's shape)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0"))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("name, content, says", [
    ("bomb.png", png_claiming(60000, 60000), "decompression bomb"),
    ("warning-bomb.png", png_claiming(10000, 10000), "decompression bomb"),
    ("notes.png", b"not an image", "cannot identify"),
    ("empty.png", b"", "cannot identify"),
    ("missing.png", None, "No such file"),
    ("folder.png", "dir", "is a folder, not an image file"),
])
def test_bad_images(capsys, here, name, content, says):
    if content == "dir":
        (here / name).mkdir()
    elif content is not None:
        (here / name).write_bytes(content)
    line = fails_in_one_line(capsys, ["predict", "--checkpoint", "ck.pth", name])
    assert name in line and says in line


def test_truncated_png_keeps_its_reason(capsys, here):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(here / "full.png")
    (here / "cut.png").write_bytes((here / "full.png").read_bytes()[:3000])
    line = fails_in_one_line(capsys, ["predict", "--checkpoint", "ck.pth", "cut.png"])
    assert "cut.png" in line and "truncated" in line


def test_16_bit_grey_is_scaled_not_saturated(here):
    from tudui.cli.prediction import open_image as _open_image
    grey = np.full((8, 8), 32768, dtype=np.uint16)  # mid-grey in 16 bits
    Image.fromarray(grey).save(here / "grey16.png")
    assert Image.open(here / "grey16.png").mode.startswith("I")
    assert np.asarray(_open_image(here / "grey16.png")).max() == 127


# --- the error boundary itself (real processes) ---------------------------------------------------------

def run_tudui(args, cwd, env=None, **kwargs):
    env = {**os.environ, "TUDUI_DATA": "synthetic", **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT, **kwargs)


BUGGY = ("import sys; from tudui.cli import main, prediction; "
         "prediction.predict = lambda args: 1 / 0; sys.exit(main(['predict', '--checkpoint', 'x', 'y']))")


@pytest.mark.parametrize("debug", [False, True])
def test_a_bug_is_one_line_and_the_traceback_is_on_request(here, debug):
    proc = run_tudui(["-c", BUGGY], here, env={"TUDUI_DEBUG": "1"} if debug else {"TUDUI_DEBUG": ""})
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert "ZeroDivisionError" in last and "bug" in last and "TUDUI_DEBUG=1" in last
    assert ("Traceback" in proc.stderr) == debug
    if not debug:
        assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("moment", ["imports", "training"])
def test_ctrl_c_is_one_line_and_exit_130(here, moment):
    proc = subprocess.Popen([sys.executable, "-m", "tudui", *TRAIN, "--force", "--limit", "5000", "--epochs", "50",
                             "--checkpoint", "ck.pth"], cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TUDUI_DATA": "synthetic", "PYTHONUNBUFFERED": "1"}, text=True)
    if moment == "imports":
        time.sleep(0.2)
    else:
        assert proc.stdout.readline().startswith("device: ")  # training has begun
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert proc.returncode == 130, err
    assert len(err.splitlines()) == 1 and err.startswith("tudui: interrupted"), err
    assert lock_is_free(here / "ck.pth.lock")


def test_resume_after_sigkill_equals_a_straight_run(here):
    args = ["train", "--device", "cpu", "--limit", "256", "--batch-size", "16", "--no-progress", "--epochs", "6"]
    os.remove(here / "ck.pth")
    proc = subprocess.Popen([sys.executable, "-m", "tudui", *args, "--checkpoint", "killed.pth"], cwd=here,
                            env={**os.environ, "TUDUI_DATA": "synthetic"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while not os.path.exists(here / "killed.pth") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait(timeout=SUBPROCESS_TIMEOUT)
    killed_at = read_checkpoint(here / "killed.pth")["epoch"]
    assert main(args + ["--checkpoint", "killed.pth", "--resume"]) == 0
    assert main(args + ["--checkpoint", "straight.pth"]) == 0
    assert 1 <= killed_at < 6, "the kill came too late to test a resume"
    assert state_equal(read_checkpoint("killed.pth")["model"], read_checkpoint("straight.pth")["model"])
    assert not [f for f in os.listdir(here) if f.endswith(".tmp")] and lock_is_free(here / "killed.pth.lock")


# --- what the one line says --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, says", [  # negative numbers are values, refused by range, not unknown options
    (["train", "--device", "gpu"], "auto, cpu, cuda, cuda:N, mps"), (["train", "--device", "cuda:x"], "cuda:x"),
    (["train", "--resume", "--checkpoint", "missing.pth"], "no checkpoint at 'missing.pth'"),
    (["predict", "--checkpoint", "nope.pth", "x.png"], "'nope.pth': cannot open the checkpoint: No such file"),
    (["train", "--lr", "-Infinity"], "--lr: must be between"), (["train", "--lr", "-inf"], "--lr: must be between"),
    (["train", "--lr", "-1e-3"], "--lr: must be between"), (["train", "--lr", "-nan"], "--lr: must be between"),
    (["train", "--epochs", "-1e3"], "--epochs: '-1e3' is not a whole number"),
    (TRAIN + ["--checkpoint", "x.png/ck.pth"], "is a file, not a folder"),
])
def test_bad_command_lines_say_what_is_wrong(capsys, here, argv, says):
    assert says in fails_in_one_line(capsys, argv)


def test_tudui_data_invalid_is_a_usage_error(capsys, here, monkeypatch):
    monkeypatch.setenv("TUDUI_DATA", "mnist")
    assert "TUDUI_DATA" in fails_in_one_line(capsys, TRAIN + ["--epochs", "1"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_here_gives_this_machines_reason(capsys, here):
    line = fails_in_one_line(capsys, TRAIN + ["--device", "cuda", "--epochs", "1", "--checkpoint", "new.pth"])
    assert "cannot use cuda" in line and not os.path.exists("new.pth")  # each reason: tests/test_device.py


# --- names a learner uses -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["n" * 146 + ".pth", "模" * 83 + ".pth", "中文 目录/检查点.pth"])
def test_long_and_chinese_checkpoint_names_train(capsys, here, name):
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    assert main(TRAIN + ["--epochs", "1", "--checkpoint", name]) == 0, capsys.readouterr().err
    assert read_checkpoint(name)["epoch"] == 1 and f"saved {name}" in capsys.readouterr().out


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
def test_wrapped_models_keys_get_a_hint(capsys, here, prefix):
    torch.save({prefix + k: v for k, v in Tudui().state_dict().items()}, here / "wrapped.pth")
    line = fails_in_one_line(capsys, ["predict", "--checkpoint", "wrapped.pth", "x.png"])
    assert f"start with {prefix!r}" in line and "unwrap(model).state_dict()" in line


# --- what is not a checkpoint, or is one in another format ---------------------------------------------------

def special_files(here):
    """Paths that would block or mislead a reader, all inside ``here`` (links to system files are only read)."""
    made = {"loop": "Too many levels of symbolic links"}
    os.symlink("loop", here / "loop")
    os.symlink("/dev/zero", here / "zero")
    made["zero"] = "not a regular file"
    if sys.platform != "win32":
        os.mkfifo(here / "fifo")
        made["fifo"] = "not a regular file"
    return made


@pytest.mark.skipif(sys.platform != "linux", reason="/dev/stdout as a link to a pipe is Linux's")
def test_dev_stdout_into_a_pipe_is_not_a_checkpoint(here):
    proc = run_tudui(["-m", "tudui", *TRAIN, "--epochs", "1", "--checkpoint", "/dev/stdout"], here)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and proc.stdout == "", proc.stderr


@pytest.mark.parametrize("role", ["checkpoint", "image", "resume"])
def test_pipes_devices_and_link_loops_never_hang(capsys, here, role):
    for name, says in special_files(here).items():
        argv = {"checkpoint": ["predict", "--checkpoint", name, "x.png"],
                "image": ["predict", "--checkpoint", "ck.pth", name],
                "resume": TRAIN + ["--epochs", "2", "--resume", "--checkpoint", name]}[role]
        line = fails_in_one_line(capsys, argv)
        assert f"{name}'" in line and says in line, line


@pytest.mark.parametrize("save, says", [
    (lambda path: torch.save(Tudui().state_dict(), path, _use_new_zipfile_serialization=False), "old (before 1.6)"),
    (lambda path: torch.jit.save(torch.jit.script(Tudui()), path), "TorchScript"),
])
def test_other_formats_are_named(capsys, here, save, says):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated
        save(here / "other.pth")
    assert says in fails_in_one_line(capsys, ["predict", "--checkpoint", "other.pth", "x.png"])


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols_load_or_are_named(capsys, here, protocol):
    torch.save(Tudui().state_dict(), here / "p.pth", pickle_protocol=protocol)
    if protocol <= 3:
        assert main(["predict", "--checkpoint", "p.pth", "x.png"]) == 0
        assert capsys.readouterr().out.startswith("x.png: ")
    else:
        line = fails_in_one_line(capsys, ["predict", "--checkpoint", "p.pth", "x.png"])
        assert f"pickle_protocol={protocol}" in line and "default protocol" in line


# --- memory bombs: refused before anything is built ------------------------------------------------------------

def rezipped(good, target, member, content):
    """``good`` with ``member`` (a suffix of its name) replaced by ``content``, deflated."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = content if info.filename.endswith(member) else src.read(info)
            dst.writestr(info.filename, data, zipfile.ZIP_DEFLATED)


def write_bomb(kind, good, path, scale=4):
    """A small file that asks for ``scale`` times what a Tudui checkpoint may make the loader allocate."""
    limit = boundary.MAX_CALL_INT
    if kind == "bytearray":
        torch.save(Payload(bytearray, scale * limit), path)
    elif kind == "linear":
        torch.save(Payload(nn.Linear, 1024, scale * 1024), path)
    elif kind == "deflated-pickle":
        with zipfile.ZipFile(good) as z:
            pickled = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
        rezipped(good, path, "data.pkl", pickled + bytes(scale * boundary.MAX_PICKLE_BYTES))
    elif kind == "deflated-storage":
        with zipfile.ZipFile(good) as z:
            last = max((n for n in z.namelist() if "/data/" in n), key=lambda n: int(n.rsplit("/", 1)[1]))
        rezipped(good, path, last, bytes(scale * boundary._budget()[0]))


BOMBS = ["bytearray", "linear", "deflated-pickle", "deflated-storage"]


@pytest.mark.parametrize("kind", BOMBS)
def test_memory_bombs_are_refused_before_allocating(capsys, here, good, kind):
    write_bomb(kind, good[0], here / "bomb.pth")
    tracemalloc.start()
    try:
        line = fails_in_one_line(capsys, ["predict", "--checkpoint", "bomb.pth", "x.png"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "refused" in line and peak < boundary.MAX_PICKLE_BYTES, (line, peak)


@pytest.mark.parametrize("kind", BOMBS)
def test_the_notebooks_load_model_refuses_the_same_bombs(here, good, kind):
    """One boundary for the notebooks and the tool: tudui.load_model runs the checks the CLI runs."""
    write_bomb(kind, good[0], here / "bomb.pth")
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="refused"):
            load_model(here / "bomb.pth")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < boundary.MAX_PICKLE_BYTES, peak


MEASURE_BOMBS = """
import resource, sys
import torch  # the tool imports it inside its boundary: not part of what a file costs
from tudui.cli import main
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
codes = [main(["predict", "--checkpoint", name, "x.png"]) for name in sys.argv[1:]]
print(codes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
def test_memory_bombs_leave_the_peak_memory_alone(here, good):
    """torch allocates outside Python's tracing: the process's peak resident memory must not grow by the
    64 MiB each file asks for (measured by the kernel, not by timing)."""
    for kind in BOMBS:
        write_bomb(kind, good[0], here / f"{kind}.pth", scale=64)
    proc = run_tudui(["-c", MEASURE_BOMBS, *(f"{kind}.pth" for kind in BOMBS)], here)
    codes, grown_kib = proc.stdout.rsplit("]", 1)
    assert codes == "[2, 2, 2, 2" and int(grown_kib) < 16 * 1024, proc.stdout + proc.stderr


# --- images -------------------------------------------------------------------------------------------------------

def test_exif_orientation_is_applied(here):
    from tudui.cli.prediction import open_image
    photo = Image.new("RGB", (40, 20), (255, 0, 0))
    photo.paste((0, 0, 255), (0, 0, 20, 20))  # left half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to view"
    photo.save(here / "phone.jpg", exif=exif, quality=95)
    upright = open_image(here / "phone.jpg")
    assert upright.size == (20, 40)
    assert upright.getpixel((10, 5))[2] > 200  # the blue half is now on top


def test_a_decoders_runtime_error_is_one_line(capsys, here, monkeypatch):
    from PIL import Image as PILImage

    def failing(*args, **kwargs):
        raise RuntimeError("Failed to decode image")  # what Pillow's AVIF plugin raises on a corrupt file

    monkeypatch.setattr(PILImage, "open", failing)
    assert "Failed to decode image" in fails_in_one_line(capsys, ["predict", "--checkpoint", "ck.pth", "x.png"])


def mutated_tiffs(folder, count):
    rng = np.random.default_rng(16)
    pixels = rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "clean.tif", compression="tiff_adobe_deflate")  # read by libtiff
    clean = bytearray((folder / "clean.tif").read_bytes())
    for i in range(count):
        data = bytearray(clean)
        for at in rng.integers(0, len(data), 6):
            data[at] = int(rng.integers(0, 256))
        (folder / f"m{i}.tif").write_bytes(bytes(data))
        yield f"m{i}.tif"


@pytest.mark.parametrize("batch", range(4))
def test_mutated_tiffs_never_print_more_than_one_line(capfd, here, batch):
    """What libtiff prints on the stderr descriptor is held back too (capfd sees the descriptor)."""
    names = list(mutated_tiffs(here, 40))[batch * 10:(batch + 1) * 10]
    for name in names:
        code = main(["predict", "--checkpoint", "ck.pth", name])
        out, err = capfd.readouterr()
        assert code in (0, 2) and len(err.splitlines()) == (code == 2), (name, err)
        assert (out.startswith(name + ": ") if code == 0 else out == "" and name in err)


# --- output that cannot be shown, and readers that go away ----------------------------------------------------------

class GoneReader(io.StringIO):
    """stdout whose reader went away: every write fails as ``| head -1`` or ``> /dev/full`` makes it fail."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    def write(self, text):
        raise self.error


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), OSError(28, "No space left on device")])
def test_a_gone_reader_never_fails_the_command_or_loses_a_save(capsys, here, monkeypatch, error):
    monkeypatch.setattr(sys, "stdout", GoneReader(error))
    assert main(TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"]) == 0
    assert main(["predict", "--checkpoint", "ck.pth", "x.png"]) == 0
    assert read_checkpoint("ck.pth")["epoch"] == 2 and capsys.readouterr().err == ""


def test_names_the_console_cannot_show_are_printed_escaped(here):
    names = ["猫.png", os.fsdecode(b"\xc3\xa8\xb1\xa8.png") if sys.platform != "win32" else "é.png"]
    if sys.platform != "win32":
        names[1] = os.fsdecode("图".encode("gbk") + b".png")  # a GBK name from a zip made on Chinese Windows
    for name in names:
        (here / name).write_bytes((here / "x.png").read_bytes())
    proc = run_tudui(["-m", "tudui", "predict", "--checkpoint", "ck.pth", *names], here,
                     env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert [line.split(": ")[0] for line in proc.stdout.splitlines()] == [
        name.encode("ascii", "backslashreplace").decode() for name in names]


# --- signals, and interrupts that something swallowed ---------------------------------------------------------------

def test_sigterm_is_treated_as_ctrl_c(here):
    proc = subprocess.Popen([sys.executable, "-m", "tudui", *TRAIN, "--limit", "5000", "--epochs", "50",
                             "--force", "--checkpoint", "ck.pth"], cwd=here, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "TUDUI_DATA": "synthetic",
                                                         "PYTHONUNBUFFERED": "1"}, text=True)
    assert proc.stdout.readline().startswith("device: ")
    proc.terminate()  # SIGTERM, as docker stop, Kaggle and Colab send
    _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert (proc.returncode, err) == (130, "tudui: interrupted (the last saved checkpoint is intact)\n")
    assert lock_is_free(here / "ck.pth.lock") and not [f for f in os.listdir(here) if f.endswith(".tmp")]


def test_a_swallowed_ctrl_c_still_stops_the_run_after_saving(capsys, here, monkeypatch):
    """As when SIGINT lands in an at-fork handler while DataLoader workers start: Python prints and ignores it."""
    real = loops.train_one_epoch

    def swallowing(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(loops, "train_one_epoch", swallowing)
    assert main(TRAIN + ["--epochs", "3", "--force", "--checkpoint", "ck.pth"]) == 130
    assert capsys.readouterr().err == "tudui: interrupted (the last saved checkpoint is intact)\n"
    assert read_checkpoint("ck.pth")["epoch"] == 1


@pytest.mark.parametrize("argv", [["predict", "--checkpoint", "ck.pth", "x.png"], TRAIN + ["--checkpoint", "n.pth"]])
def test_an_interrupt_with_nothing_saved_claims_no_checkpoint(capsys, here, monkeypatch, argv):
    monkeypatch.setattr(loops, "fit", mock.Mock(side_effect=KeyboardInterrupt))
    monkeypatch.setattr("tudui.cli.prediction.open_image", mock.Mock(side_effect=KeyboardInterrupt))
    assert main(argv) == 130 and capsys.readouterr().err == "tudui: interrupted\n"


# --- resume across machines -------------------------------------------------------------------------------------------

def test_the_worker_setting_is_recorded_and_a_change_noted(capsys, here, monkeypatch):
    assert read_checkpoint("ck.pth")["extra"]["args"]["workers"] == data.default_num_workers()
    state = tampered("ck.pth")
    state["extra"]["args"]["workers"] = 0 if data.default_num_workers() else 3
    torch.save(state, "other-machine.pth")
    assert main(TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "other-machine.pth"]) == 0
    assert "note: the checkpoint was trained with" in capsys.readouterr().out


@pytest.mark.parametrize("before, now, noted", [(0, 0, False), (3, 1, False), (0, 2, True), (4, 0, True),
                                                ("many", 0, False), (None, 3, False)])
def test_workers_note(before, now, noted):
    assert (workers_note({"workers": before}, now) is not None) == noted


@pytest.mark.parametrize("value", [torch.tensor([0, 0]), "0", 0.0, [[[[0]]]], None])
def test_recorded_settings_of_another_type_are_a_change(capsys, here, value):
    state = tampered("ck.pth")
    state["extra"]["args"]["seed"] = value
    torch.save(state, "typed.pth")
    assert "--seed" in fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "typed.pth"])


def test_a_deeply_nested_setting_is_refused_in_one_line(capsys, here):
    with zipfile.ZipFile("ck.pth") as z:  # torch.save cannot write it (a RecursionError): build the pickle
        pickled = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    deep = b"]" * 100_000 + b"a" * 99_999  # EMPTY_LIST and APPEND: lists 100,000 deep
    at = pickled.index(b"X\x05\x00\x00\x00limitq") + 12  # BINUNICODE "limit", BINPUT, then its value:
    end = at + 2  # BININT1 32
    rezipped("ck.pth", "deep.pth", "data.pkl", pickled[:at] + deep + pickled[end:])
    assert "--limit <a list>" in fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume",
                                                                    "--checkpoint", "deep.pth"])


# --- full disks, locks, launches ------------------------------------------------------------------------------

FULL_DISK = """
import resource, sys
from tudui.cli import main
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # a checkpoint needs about 600 kB
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is Unix's")
def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_file(here):
    before = (here / "ck.pth").read_bytes()
    proc = run_tudui(["-c", FULL_DISK, *TRAIN, "--epochs", "2", "--resume", "--checkpoint", "ck.pth"], here)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "is the disk full?" in proc.stderr and "the previous file is unchanged" in proc.stderr
    assert (here / "ck.pth").read_bytes() == before and not [f for f in os.listdir(here) if f.endswith(".tmp")]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), PermissionError(13, "Permission denied")])
def test_a_lock_that_cannot_be_made_is_one_line(capsys, here, monkeypatch, error):
    monkeypatch.setattr(filelock.FileLock, "acquire", mock.Mock(side_effect=error))
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"])
    assert error.strerror in line and "choose another --checkpoint" in line


@pytest.mark.parametrize("value", ["0", "abc", "", "-3", "²", "9" * 5000])
def test_odd_local_world_sizes_outside_torchrun_train(capsys, here, monkeypatch, value):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    assert main(TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth"]) == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("rank, world, addr", [(0, "2", "127.0.0.1"), (1, "2", "127.0.0.1"),
                                               (0, "99999999999999999999", "127.0.0.1")])
def test_a_launch_with_no_peers_says_how_long_it_waits_then_gives_up(capfd, here, monkeypatch, rank, world, addr,
                                                                    lang):
    """torchrun's variables set by hand: the wait is announced before it starts, ends when it said, and what
    c10d prints while it retries is held back."""
    monkeypatch.setattr(distributed, "JOIN_TIMEOUT", datetime.timedelta(seconds=2))
    port = free_port()
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("MASTER_ADDR", addr)
    monkeypatch.setenv("MASTER_PORT", str(port))
    start = time.monotonic()
    assert main(TRAIN + ["--epochs", "1", "--checkpoint", "n.pth", "--lang", lang]) == 2
    assert time.monotonic() - start < 60  # 2 s, and torch's own retries
    out, err = capfd.readouterr()
    waiting, line = err.splitlines()
    assert out == "" and not os.path.exists("n.pth")
    if world != "2":  # torch refuses the size at once
        assert line.startswith(("tudui: error: cannot join the other processes", "tudui: 错误：无法和其他进程会合"))
        return
    if lang == "en":
        assert waiting == f"rank {rank}: waiting up to 2 s for all 2 processes to join at {addr}:{port}"
        assert line.startswith("tudui: error: cannot join the other processes")
        assert f"waited up to 2 s for all 2 at {addr}:{port}" in line
    else:
        assert waiting == f"rank {rank}：正在 {addr}:{port} 等全部 2 个进程到齐，最多等 2 秒"
        assert line.startswith("tudui: 错误：无法和其他进程会合") and "最多等了 2 秒" in line


@pytest.mark.parametrize("value", ["²", "9" * 5000, "abc"])
def test_odd_local_world_sizes_under_torchrun_are_refused_by_name(capsys, here, monkeypatch, value):
    for name, set_to in {**TORCHRUN, "LOCAL_WORLD_SIZE": value}.items():
        monkeypatch.setenv(name, set_to)
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--checkpoint", "n.pth"])
    assert f"LOCAL_WORLD_SIZE={value[:40]!r} is not a whole number" in line and "torchrun" in line


TORCHRUN = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
HALF = ("WORLD_SIZE is set, but not {}: this environment is half a torchrun launch; unset WORLD_SIZE to train in one "
        "process, or launch with: torchrun --nproc-per-node=N -m tudui train ...")


@pytest.mark.parametrize("lang, says", [("en", "tudui: error: " + HALF.format("RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT")),
                                        ("zh", "tudui: 错误：设置了 WORLD_SIZE，却没有 RANK, LOCAL_RANK, MASTER_ADDR, "
                                               "MASTER_PORT：这不是完整的 torchrun 启动环境")])
def test_world_size_set_by_hand_is_half_a_launch_not_a_lone_training(capsys, here, monkeypatch, lang, says):
    for name in TORCHRUN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with mock.patch("tudui.loops.fit", side_effect=AssertionError("trained")):
        line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--checkpoint", "n.pth", "--lang", lang])
    assert line.startswith(says) and not os.path.exists("n.pth")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name, value, says", [
    ("MASTER_PORT", "abc", ("MASTER_PORT='abc' is not a port", "MASTER_PORT='abc' 不是端口号")),
    ("MASTER_PORT", "99999", ("MASTER_PORT='99999' is not a port", "MASTER_PORT='99999' 不是端口号")),
    ("MASTER_ADDR", "nosuch.invalid", ("MASTER_ADDR='nosuch.invalid' is not an address this machine can reach",
                                       "MASTER_ADDR='nosuch.invalid' 不是这台机器能找到的地址")),
])
def test_a_rendezvous_no_process_could_reach_is_refused_at_once(capsys, here, monkeypatch, lang, name, value, says):
    """Before any "waiting up to 600 s" line: a port that is not one, an address that does not resolve."""
    for var, set_to in {**TORCHRUN, name: value}.items():
        monkeypatch.setenv(var, set_to)
    start = time.monotonic()
    line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--checkpoint", "n.pth", "--lang", lang])
    assert time.monotonic() - start < 30 and says[lang == "zh"] in line and "torchrun --nproc-per-node=N" in line


@pytest.mark.parametrize("lang, says", [("en", "is not a folder (a file or a device)"), ("zh", "不是文件夹")])
@pytest.mark.parametrize("root", ["/dev/null", "x.png", "x.png/data"])
def test_a_data_root_that_is_not_a_folder_is_one_line(capsys, here, lang, says, root):
    before = snapshot(here)
    argv = TRAIN + ["--epochs", "1", "--force", "--data", "auto", "--root", root, "--lang", lang]
    line = fails_in_one_line(capsys, argv)
    assert says in line and repr(root) in line
    assert snapshot(here) == before


def quantized_weights():
    weights = Tudui().state_dict()
    weights["model.8.weight"] = torch.quantize_per_tensor(weights["model.8.weight"], 0.1, 0, torch.qint8)
    return weights


def sparse_csr_weights():
    weights = Tudui().state_dict()
    weights["model.8.weight"] = weights["model.8.weight"].to_sparse_csr()
    return weights


@pytest.mark.parametrize("content", [quantized_weights, sparse_csr_weights,
                                     lambda: Payload(torch.cuda.FloatTensor, 3)])
def test_what_torch_warns_about_while_loading_stays_one_line(capfd, here, content):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(content(), here / "odd.pth")
    assert main(["predict", "--checkpoint", "odd.pth", "x.png"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "odd.pth" in err, err


# --- images are opened by content, from a list of formats ---------------------------------------------------------

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto 8 8 lineto stroke\nshowpage\n"


@pytest.mark.parametrize("lang, says", [("en", "not a PNG, JPEG, BMP, GIF, WebP or TIFF image"),
                                        ("zh", "不是 PNG、JPEG、BMP、GIF、WebP 或 TIFF 图片")])
def test_an_eps_named_jpg_starts_no_other_program(capsys, here, monkeypatch, lang, says):
    from PIL import EpsImagePlugin
    (here / "dog.jpg").write_bytes(EPS)
    assert Image.open(here / "dog.jpg").format == "EPS"  # what Pillow alone would make of it: Ghostscript's job
    started = mock.Mock(side_effect=AssertionError("Ghostscript started"))
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", started)
    monkeypatch.setattr(subprocess, "Popen", started)
    line = fails_in_one_line(capsys, ["predict", "--lang", lang, "--checkpoint", "ck.pth", "dog.jpg"])
    assert "dog.jpg" in line and says in line and not started.called


@pytest.mark.parametrize("fmt, opens", [("PNG", True), ("JPEG", True), ("BMP", True), ("GIF", True),
                                        ("WEBP", True), ("TIFF", True), ("PCX", False), ("TGA", False),
                                        ("PPM", False), ("ICO", False), ("SGI", False)])
def test_only_the_listed_formats_open_whatever_the_name(capsys, here, fmt, opens):
    Image.new("RGB", (16, 16), (200, 40, 40)).save(here / "picture.png", format=fmt)  # named .png whatever it is
    if opens:
        assert main(["predict", "--checkpoint", "ck.pth", "picture.png"]) == 0
        assert capsys.readouterr().out.startswith("picture.png: ")
    else:
        assert "not a PNG, JPEG" in fails_in_one_line(capsys, ["predict", "--checkpoint", "ck.pth", "picture.png"])


def test_warnings_as_errors_do_not_turn_a_pillow_warning_into_a_bug(capsys, here):
    palette = Image.new("P", (8, 8))
    palette.putpalette([0, 0, 0, 255, 0, 0] * 128)
    palette.info["transparency"] = bytes(range(256))
    palette.save(here / "palette.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as PYTHONWARNINGS=error does
        with pytest.raises(UserWarning, match="Palette images with Transparency"):
            Image.open(here / "palette.png").convert("RGB")
        assert main(["predict", "--checkpoint", "ck.pth", "palette.png"]) == 0
    assert capsys.readouterr().out.startswith("palette.png: ")


def png_16_bit(path, width, height):
    """A mid-grey 16-bit PNG, written row by row (quick, and small on disk)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    deflate, row = zlib.compressobj(1), b"\0" + b"\x80\x00" * width
    pixels = b"".join([deflate.compress(row) for _ in range(height)] + [deflate.flush()])
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 0, 0, 0, 0))
                     + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


MEASURE_IMAGE = """
import resource, sys
import torch, torchvision.transforms, PIL.PngImagePlugin  # what every prediction imports
from tudui.cli import main, prediction
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(["predict", "--checkpoint", "ck.pth", sys.argv[1]])
print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
def test_a_16_bit_png_just_under_the_bomb_limit_is_classified_in_its_own_memory(here):
    """89 million 16-bit pixels are 178 MB once decoded; converting them at full size took over 2 GB."""
    side = int(Image.MAX_IMAGE_PIXELS ** 0.5) - 1
    png_16_bit(here / "big16.png", side, side)
    proc = run_tudui(["-c", MEASURE_IMAGE, "big16.png"], here)
    code, grown_kib = proc.stdout.splitlines()[-1].split()
    assert code == "0" and int(grown_kib) < 512 * 1024, proc.stdout + proc.stderr
    assert proc.stdout.startswith("big16.png: ")


def test_a_big_photo_is_reduced_then_turned_upright(here):
    from tudui.cli.prediction import LARGEST, open_image
    photo = Image.new("RGB", (4000, 2000), (255, 0, 0))
    photo.paste((0, 0, 255), (0, 0, 2000, 2000))  # left half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to view"
    photo.save(here / "phone.jpg", exif=exif, quality=90)
    upright = open_image(here / "phone.jpg")
    assert max(upright.size) <= LARGEST and upright.size[1] == 2 * upright.size[0]
    assert upright.getpixel((upright.size[0] // 2, 5))[2] > 200  # the blue half is on top


# --- the checkpoint's path, as the system resolves it ---------------------------------------------------------------

@pytest.mark.skipif(sys.platform == "win32", reason="Windows resolves nosuch/.. by name: it is ck.pth there")
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("spelling", ["ck.pth/.", "nosuch/../ck.pth", "x.png/../ck.pth", "ck.pth/..", "./ck.pth",
                                      "sub/../ck.pth", "link/ck.pth"])
def test_no_spelling_of_an_existing_checkpoint_replaces_it_without_force(capsys, here, spelling, lang):
    (here / "sub").mkdir()
    (here / "link").symlink_to(here)
    before = snapshot(here)
    with mock.patch("tudui.loops.fit", side_effect=AssertionError("trained")):
        line = fails_in_one_line(capsys, TRAIN + ["--epochs", "1", "--lang", lang, "--checkpoint", spelling])
    assert spelling in line or f"{os.path.dirname(spelling)!r}" in line  # the path, or its folder that is none
    assert ("--force" in line) == (spelling in ("./ck.pth", "sub/../ck.pth", "link/ck.pth"))
    assert (lang == "zh") == any("\u4e00" <= c <= "\u9fff" for c in line)
    assert snapshot(here) == before


def test_a_spelling_of_an_existing_checkpoint_is_that_file_with_force(capsys, here):
    (here / "sub").mkdir()
    assert main(TRAIN + ["--epochs", "1", "--force", "--checkpoint", "sub/../ck.pth"]) == 0
    assert read_checkpoint("ck.pth")["epoch"] == 1 and os.listdir(here / "sub") == []


# --- every failure to read a checkpoint is the one refusal ----------------------------------------------------------

def recompressed(good, target, compression):
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compression)


def flag_encrypted(path):
    """Set the "encrypted" bit of every entry, in the local and the central headers."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            data[info.header_offset + 6] |= 1
    at = struct.unpack("<I", data[data.rfind(b"PK\x05\x06") + 16:][:4])[0]
    while data[at:at + 4] == b"PK\x01\x02":
        data[at + 8] |= 1
        at += 46 + sum(struct.unpack("<HHH", data[at + 28:at + 34]))
    path.write_bytes(bytes(data))


def odd_checkpoint(kind, good, path):
    weights = Tudui().state_dict()
    if kind == "corrupt-member":
        rezipped(good, path, "data.pkl", b"x" * 4000)
        data = bytearray(path.read_bytes())
        at = data.index(zlib.compress(b"x" * 4000)[2:8])
        data[at:at + 6] = b"\xff" * 6  # the deflated bytes of data.pkl no longer inflate
        path.write_bytes(bytes(data))
    elif kind == "encrypted":
        path.write_bytes(good.read_bytes())
        flag_encrypted(path)
    elif kind in ("bzip2", "lzma"):
        recompressed(good, path, {"bzip2": zipfile.ZIP_BZIP2, "lzma": zipfile.ZIP_LZMA}[kind])
    elif kind == "meta":
        torch.save({k: v.to("meta") for k, v in weights.items()}, path)
    elif kind.startswith("float8"):
        torch.save({k: v.to(getattr(torch, kind)) for k, v in weights.items()}, path)
    elif kind == "view-2**40":
        torch.save({**weights, "model.8.bias": torch.zeros(1).expand(2**40)}, path)
    elif kind == "empty-zip":
        zipfile.ZipFile(path, "w").close()


ODD = ["corrupt-member", "encrypted", "bzip2", "lzma", "meta", "float8_e4m3fn", "float8_e5m2", "view-2**40",
       "empty-zip"]


@pytest.mark.parametrize("command", ["predict", "resume"])
@pytest.mark.parametrize("kind", ODD)
def test_every_failure_to_read_a_checkpoint_is_one_refusal(capsys, here, good, kind, command):
    odd_checkpoint(kind, good[0], here / "odd.pth")
    before = snapshot(here)
    tracemalloc.start()
    try:
        line = fails_in_one_line(capsys, ["predict", "--checkpoint", "odd.pth", "x.png"] if command == "predict"
                                 else TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "odd.pth"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "'odd.pth'" in line and "internal error" not in line and peak < 64 << 20, (line, peak)
    assert snapshot(here) == before


@pytest.mark.parametrize("kind, en, zh", [
    ("meta", "(device meta)", "（device meta）"),
    ("float8_e4m3fn", "(dtype torch.float8_e4m3fn)", "（dtype torch.float8_e4m3fn）"),
    ("view-2**40", "(shape torch.Size([1099511627776]))", "（shape torch.Size([1099511627776])）"),
    ("empty-zip", "a zip archive with 0 data.pkl entries", "这个 zip 压缩包里有 0 个 data.pkl"),
    ("encrypted", "is encrypted", "文件已损坏"),
])
def test_the_refusal_says_what_is_wrong_in_both_languages(capsys, here, good, kind, en, zh):
    odd_checkpoint(kind, good[0], here / "odd.pth")
    for lang, says in (("en", en), ("zh", zh)):
        line = fails_in_one_line(capsys, ["predict", "--lang", lang, "--checkpoint", "odd.pth", "x.png"])
        assert says in line and "more than a Tudui checkpoint holds" not in line, line


def test_a_pickle_of_a_million_items_after_a_mark_is_read_quickly(capsys, here):
    pickled = b"\x80\x02(" + b"N" * 1_000_000 + b"t."  # MARK, a million Nones, TUPLE: under the 1 MiB limit
    start = time.monotonic()
    boundary._check_calls("p.pth", pickled)  # read in one pass (it took minutes, item by item)
    assert time.monotonic() - start < 10
    rezipped("ck.pth", "marks.pth", "data.pkl", pickled)
    assert "holds a tuple" in fails_in_one_line(capsys, ["predict", "--checkpoint", "marks.pth", "x.png"])
    assert time.monotonic() - start < 60


# --- the command line ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["train", "--no-p"], ["train", "--check", "n.pth"], ["train", "--epoch", "1"],
                                  ["predict", "--check", "ck.pth", "x.png"], ["train", "--forc"]])
def test_abbreviations_are_not_options(capsys, here, argv):
    before = snapshot(here)
    with mock.patch("tudui.loops.fit", side_effect=AssertionError("trained")):
        line = fails_in_one_line(capsys, argv)
    assert f"unrecognized arguments: {argv[1]}" in line or "required: --checkpoint" in line
    assert snapshot(here) == before


def test_version(capsys):
    with pytest.raises(SystemExit) as end:
        main(["--version"])
    assert end.value.code == 0
    assert capsys.readouterr().out.startswith(f"tudui {__import__('tudui').__version__} (torch {torch.__version__}, ")


@pytest.mark.parametrize("lang, says", [("en", "torch cannot start: Invalid log settings: nonsense"),
                                        ("zh", "torch 无法启动：Invalid log settings: nonsense")])
def test_a_bad_torch_logs_is_one_line(here, lang, says):
    proc = run_tudui(["-m", "tudui", "predict", "--lang", lang, "--checkpoint", "ck.pth", "x.png"], here,
                     env={"TORCH_LOGS": "nonsense"})
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert says in proc.stderr and "TORCH_LOGS" in proc.stderr


GONE = """
import os, sys
os.rmdir(os.getcwd())  # the folder is deleted under the process, before torch loads
from tudui.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("lang, says", [("en", "the current folder no longer exists"), ("zh", "当前文件夹已经不存在了")])
def test_a_working_folder_deleted_under_the_process_is_one_line(here, lang, says):
    (here / "gone").mkdir()
    proc = run_tudui(["-c", GONE, "predict", "--lang", lang, "--checkpoint", str(here / "ck.pth"),
                      str(here / "x.png")], here / "gone", env={"PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert says in proc.stderr and "FATAL" not in proc.stderr


# --- the language: --lang, else $TUDUI_LANG, else English ------------------------------------------------------------

def test_train_and_predict_speak_chinese(capsys, here):
    assert main(TRAIN + ["--epochs", "2", "--resume", "--checkpoint", "ck.pth", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("设备：cpu；数据：") and "从 ck.pth 第 1 轮之后接着训练" in out
    assert out.endswith("已保存 ck.pth\n")
    assert main(["predict", "--lang", "zh", "--checkpoint", "ck.pth", "x.png"]) == 0
    label = capsys.readouterr().out.strip()
    assert label.startswith("x.png：") and label.endswith("%）") and not label.isascii()


@pytest.mark.parametrize("argv, zh", [
    (["train", "--epochs", "0"], "--epochs: 必须在 1 到 10000 之间，现在是 0（用法见：python -m tudui train --help）"),
    (["train", "--checkpoint", "ck.pth"], "'ck.pth' 已经存在；加 --resume 接着训练"),
    (["predict", "--checkpoint", "nope.pth", "x.png"], "'nope.pth'：无法打开检查点："),
    (["predict", "--checkpoint", "ck.pth", "x.pngg"], "'x.pngg'：无法打开图片："),
])
def test_errors_speak_the_chosen_language(capsys, here, monkeypatch, argv, zh):
    for chosen in ([], ["--lang", "zh"]):
        monkeypatch.setenv("TUDUI_LANG", "zh" if not chosen else "en")
        line = fails_in_one_line(capsys, argv + chosen)
        assert line.startswith("tudui: 错误：") and zh in line, line
    monkeypatch.setenv("TUDUI_LANG", "zh")
    assert fails_in_one_line(capsys, argv + ["--lang", "en"]).startswith("tudui: error: ")
    monkeypatch.delenv("TUDUI_LANG")
    assert fails_in_one_line(capsys, argv).startswith("tudui: error: ")  # and the choice did not stay


@pytest.mark.parametrize("value", ["fr", "zh-CN", "x" * 5000])
def test_an_unknown_tudui_lang_is_one_line(capsys, here, monkeypatch, value):
    monkeypatch.setenv("TUDUI_LANG", value)
    assert "TUDUI_LANG" in fails_in_one_line(capsys, ["predict", "--checkpoint", "ck.pth", "x.png"])
    assert main(["predict", "--lang", "zh", "--checkpoint", "ck.pth", "x.png"]) == 0  # --lang wins


def test_interrupted_in_chinese(capsys, here, monkeypatch):
    monkeypatch.setattr(loops, "fit", mock.Mock(side_effect=KeyboardInterrupt))
    assert main(TRAIN + ["--checkpoint", "ck.pth", "--resume", "--lang", "zh"]) == 130
    assert capsys.readouterr().err == "tudui: 已中断（最后保存的检查点完好无损）\n"


def test_help_is_in_the_chosen_language(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help", "--lang", "zh"])
    out = capsys.readouterr().out
    assert "训练多少轮（默认：10）" in out and "覆盖已有的 --checkpoint" in out and "how many epochs" not in out


def test_the_doctor_follows_the_same_setting(capsys, monkeypatch):
    from tudui.cli import doctor
    monkeypatch.setattr(doctor, "run", lambda lang: print("diagnosis in", lang))
    monkeypatch.setenv("TUDUI_LANG", "zh")
    assert main(["doctor"]) == 0 and main(["doctor", "--lang", "en"]) == 0 and main(["--lang", "en", "doctor"]) == 0
    assert capsys.readouterr().out == "diagnosis in zh\ndiagnosis in en\ndiagnosis in en\n"
