"""``python -m tudui doctor | train | predict``: exit codes, one-line errors, real output."""
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from PIL import Image
from torchvision.transforms import ToTensor

from tudui import CLASSES, cifar10, load_model, read_checkpoint
from tudui.cli import doctor
from tudui.cli import main
from helpers import course_tudui_class, registered, saved_as_on_gpu

PREDICTION = re.compile(r"^(?P<path>.+): (?P<label>" + "|".join(CLASSES) + r") \((?P<pct>\d+\.\d)%\)$")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One real ``python -m tudui train`` in a subprocess: its result, and the checkpoint it wrote."""
    folder = tmp_path_factory.mktemp("cli")
    env = {**os.environ, "TUDUI_DATA": "synthetic"}
    proc = subprocess.run(
        [sys.executable, "-m", "tudui", "train", "--data", "synthetic", "--limit", "64", "--batch-size", "32",
         "--epochs", "1", "--device", "cpu", "--no-progress", "--checkpoint", "ck.pth"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return proc, folder / "ck.pth"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "data/" and "tudui.pth" defaults land here, not in the repo


# --- the real command ---------------------------------------------------------------------------

def test_python_m_tudui_train_exits_zero(trained):
    proc, checkpoint = trained
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "device: cpu" in proc.stdout and "synthetic stand-in" in proc.stdout
    assert re.search(r"^epoch 1: train loss \d\.\d{3}, test loss \d\.\d{3}, test accuracy \d+\.\d%$",
                     proc.stdout, re.M)
    assert "saved ck.pth" in proc.stdout
    info = read_checkpoint(checkpoint)
    assert info["epoch"] == 1 and info["extra"]["args"]["limit"] == 64


# --- predict ------------------------------------------------------------------------------------

def test_predict_prints_a_class_and_a_percentage(capsys, tmp_path, trained):
    checkpoint = trained[1]
    photo = tmp_path / "photo.png"
    Image.new("RGB", (50, 40), (200, 30, 30)).save(photo)  # any size: resized to 32x32
    grey = tmp_path / "grey.png"
    Image.new("L", (64, 64), 128).save(grey)  # any mode: converted to RGB
    test_image = tmp_path / "cifar.png"
    ds = cifar10(False, source="synthetic", limit=1)
    Image.fromarray(ds.data[0]).save(test_image)

    code, out, err = run(capsys, "predict", "--checkpoint", str(checkpoint), str(photo), str(grey), str(test_image))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 3
    matches = [PREDICTION.match(line) for line in lines]
    assert all(matches), lines
    assert [m["path"] for m in matches] == [str(photo), str(grey), str(test_image)]
    assert all(10.0 <= float(m["pct"]) <= 100.0 for m in matches)  # the top class of 10 has >= 10 %

    # The printed class and probability are the model's own for that image.
    model = load_model(checkpoint)
    with torch.no_grad():
        probs = model(ToTensor()(Image.open(test_image).convert("RGB")).unsqueeze(0)).softmax(1)[0]
    k = int(probs.argmax())
    assert matches[2]["label"] == CLASSES[k]
    assert matches[2]["pct"] == f"{probs[k].item() * 100:.1f}"


def test_predict_reads_the_courses_gpu_saved_file(capsys, tmp_path):
    """The learner's tudui_9.pth from GPU training, on a CPU-only machine."""
    cls = course_tudui_class("model")
    with registered(cls, "model"):
        with saved_as_on_gpu():
            torch.save(cls(), tmp_path / "tudui_9.pth")
    Image.new("RGB", (32, 32), (0, 90, 200)).save(tmp_path / "sky.png")
    code, out, err = run(capsys, "predict", "--checkpoint", str(tmp_path / "tudui_9.pth"), str(tmp_path / "sky.png"))
    assert code == 0, err
    assert PREDICTION.match(out.strip())


# --- train details ------------------------------------------------------------------------------

def test_resume_when_already_done_trains_nothing(capsys, tmp_path, trained):
    shutil.copy(trained[1], tmp_path / "done.pth")
    before = (tmp_path / "done.pth").read_bytes()
    code, out, err = run(capsys, "train", "--resume", "--checkpoint", "done.pth", "--epochs", "1", "--data",
                         "synthetic", "--limit", "64", "--batch-size", "32", "--device", "cpu", "--no-progress")
    assert code == 0, err
    assert "resuming after epoch 1" in out and "nothing to do" in out
    assert "epoch 2" not in out
    assert (tmp_path / "done.pth").read_bytes() == before


# --- doctor -------------------------------------------------------------------------------------

def test_doctor_runs_the_diagnosis(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "run", lambda lang: print("diagnosis in", lang))
    assert run(capsys, "doctor") == (0, "diagnosis in en\n", "")


def test_ctrl_c_in_the_doctor_says_interrupted_and_nothing_about_checkpoints(capsys, monkeypatch):
    def interrupted(lang):
        raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "run", interrupted)
    assert run(capsys, "doctor") == (130, "", "tudui: interrupted\n")


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_train_on_gpu_then_resume_on_cpu(capsys):
    common = ["train", "--data", "synthetic", "--limit", "128", "--batch-size", "64", "--no-progress",
              "--checkpoint", "moved.pth"]
    code, out, err = run(capsys, *common, "--device", "cuda", "--epochs", "1")
    assert code == 0, err
    assert "device: cuda:0" in out
    code, out, err = run(capsys, *common, "--device", "cpu", "--epochs", "2", "--resume")
    assert code == 0, err
    assert "device: cpu" in out and "resuming after epoch 1" in out
    assert read_checkpoint("moved.pth")["epoch"] == 2


def test_the_data_choices_of_train_are_the_sources_tudui_data_knows():
    from tudui import data
    from tudui.cli import COMMANDS
    assert tuple(COMMANDS["train"]["arguments"]["--data"]["choices"]) == data.SOURCES
