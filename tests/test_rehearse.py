"""python -m tudui rehearse: the course's two GPU scripts (our own transcriptions, tests/scripts/) pass on the pretend
GPU; each move of the post's checklist left out is reported at the learner's own line; nothing beside the script
changes; a script that cannot run or misbehaves gets one clear line."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import tudui
from tudui.cli import main

SCRIPTS = Path(__file__).resolve().parent / "scripts"
CUDA_WAY, TO_WAY = (SCRIPTS / "train_gpu_1.py").read_text(encoding="utf-8"), (SCRIPTS / "train_gpu_2.py").read_text(
    encoding="utf-8")


@pytest.fixture
def learner(tmp_path):
    """The learner's folder: code/ with a script, beside it nothing else; checked unchanged after each test."""
    code = tmp_path / "code"
    code.mkdir()

    def write(text, name="train.py"):
        (code / name).write_text(text, encoding="utf-8")
        return code / name

    yield write
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == sorted(
        p.relative_to(tmp_path) for p in [code, *code.iterdir()]), "the rehearsal created files beside the script"


def rehearse(capsys, script, *options):
    code = main(["rehearse", *options, str(script)])
    out, err = capsys.readouterr()
    return code, out, err


def without(text, line, nth=0):
    """``text`` with the ``nth`` occurrence of the whole line ``line`` (stripped) left out (a ``pass`` in its place)."""
    lines = text.splitlines(keepends=True)
    k = [i for i, t in enumerate(lines) if t.strip() == line][nth]
    lines[k] = lines[k][:len(lines[k]) - len(lines[k].lstrip())] + "pass\n"
    return "".join(lines)


def line_of(text, line, nth=0) -> int:
    return [i for i, t in enumerate(text.splitlines(), 1) if t.strip() == line][nth]


@pytest.mark.parametrize("lang, passed", [("en", "Rehearsal passed"), ("zh", "预演通过")])
@pytest.mark.parametrize("text", [CUDA_WAY, TO_WAY], ids=["cuda-way", "to-device-way"])
def test_the_course_scripts_pass(capsys, learner, text, lang, passed):
    code, out, err = rehearse(capsys, learner(text), "--lang", lang)
    assert (code, err) == (0, "") and passed in out
    assert ("10 file(s)" in out or "10 个文件" in out) and "map_location" in out  # ten saves; the whole-model note


CHECKLIST = [  # (the line left out, which occurrence, where it then fails, which occurrence, what is on the CPU)
    ("tudui = tudui.cuda()", 0, "outputs = tudui(imgs)", 0, "tudui"),
    ("imgs = imgs.cuda()", 0, "outputs = tudui(imgs)", 0, "imgs"),
    ("targets = targets.cuda()", 0, "loss = loss_fn(outputs, targets)", 0, "targets"),
    ("imgs = imgs.cuda()", 1, "outputs = tudui(imgs)", 1, "imgs"),
    ("targets = targets.cuda()", 1, "loss = loss_fn(outputs, targets)", 1, "targets"),
]


@pytest.mark.parametrize("left_out, nth, fails_at, at_nth, on_cpu", CHECKLIST,
                         ids=["model", "train-inputs", "train-targets", "test-inputs", "test-targets"])
def test_each_move_left_out_is_named_at_the_learners_line(capsys, learner, left_out, nth, fails_at, at_nth, on_cpu):
    text = without(CUDA_WAY, left_out, nth)
    code, out, _ = rehearse(capsys, learner(text))
    assert code == 1 and "same device" in out
    assert f"line {line_of(text, fails_at, at_nth)}: {fails_at}" in out
    assert f"{on_cpu} = {on_cpu}.cuda()" in out and "lesson 02" in out


def test_a_loss_with_weights_left_on_the_cpu_in_the_to_device_style(capsys, learner):
    text = TO_WAY.replace("loss_fn = nn.CrossEntropyLoss()", "loss_fn = nn.CrossEntropyLoss(weight=torch.ones(10))")
    text = without(text, "loss_fn = loss_fn.to(device)")
    code, out, _ = rehearse(capsys, learner(text))
    assert code == 1 and f"line {line_of(text, 'loss = loss_fn(outputs, targets)')}" in out
    assert "loss_fn = loss_fn.to(device)" in out and "lesson 03" in out


def test_a_discarded_tensor_move_is_reported(capsys, learner):
    text = TO_WAY.replace("        imgs = imgs.to(device)\n", "        imgs.to(device)\n", 1)
    code, out, _ = rehearse(capsys, learner(text))
    assert code == 1 and f"line {line_of(text, 'outputs = tudui(imgs)')}" in out
    assert f"thrown away: a tensor does not move in place; write x = x.to(device) (line {line_of(text, 'imgs.to(device)')})" in out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_script_that_cannot_run_is_one_line_and_exit_2(capsys, learner, lang):
    for script in (learner("print(1)\n").parent / "nosuch.py", learner("def f(:\n", "bad.py"),
                   learner("x = 1\n", "latin.py")):
        if script.name == "latin.py":
            script.write_bytes("x = 'é'\n".encode("latin-1"))
        code, out, err = rehearse(capsys, script, "--lang", lang)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and script.name in err


@pytest.mark.parametrize("body, said", [
    ("import sys\nsys.exit(3)\n", "sys.exit(3)"),
    ("name = input('your name? ')\n", "EOFError"),
    ("while True:\n    pass\n", "stopped after 1 s"),
    ("import os\nfor f in os.listdir('.'):\n    os.remove(f)\nopen('x.txt', 'w').write('x')\nos.remove('x.txt')\n"
     "raise ValueError('done')\n", "ValueError: done"),
])
def test_a_script_that_misbehaves_is_reported_and_the_folder_is_untouched(capsys, learner, body, said):
    code, out, err = rehearse(capsys, learner(body), "--max-seconds", "1")
    assert code == 1 and said in out and err == ""


def test_a_state_dict_saved_from_the_gpu_and_loaded_again_stays_on_the_gpu(capsys, learner):
    text = CUDA_WAY + textwrap.dedent("""
        torch.save(tudui.state_dict(), "w.pth")
        state = torch.load("w.pth")  # on a GPU: its tensors are on cuda:0 again
        again = torch.load("tudui_9.pth", weights_only=False)  # the whole model, on cuda:0 again
        print((again(imgs) - tudui(imgs)).abs().sum() + state["model.0.bias"].sum())
    """)
    code, out, err = rehearse(capsys, learner(text))
    assert (code, err) == (0, "") and "11 file(s)" in out


def test_dataloader_workers_are_turned_off_with_a_note(capsys, learner):
    code, out, _ = rehearse(capsys, learner(CUDA_WAY.replace("batch_size=64)", "batch_size=64, num_workers=2)")))
    assert code == 0 and "workers" in out


def test_from_a_notebook_a_result_to_inspect_and_a_pretend_gpu_for_a_cell(capsys, learner):
    result = tudui.rehearse(learner(without(CUDA_WAY, "targets = targets.cuda()", 1)), quiet=True)
    assert not result.passed and result.line == line_of(without(CUDA_WAY, "targets = targets.cuda()", 1),
                                                         "loss = loss_fn(outputs, targets)", 1)
    with tudui.pretend_gpu() as gpu:
        x = torch.ones(3).cuda()
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.ones(3)
        print(x.sum().item())
    assert gpu.syncs == 1 and len(gpu.moved) == 1
