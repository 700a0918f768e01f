"""Real training scripts (our transcriptions, tests/corpus/README.md says of what) rehearse as they are, and each
with one needed device move left out exits 1 naming the line where a real GPU would stop. Datasets other than
CIFAR-10 (MNIST, FashionMNIST) are not on disk here: the rehearsal says so and uses random images of their shape."""
import time
from pathlib import Path

import pytest

from tudui.cli import main

CORPUS, SCRIPTS = Path(__file__).resolve().parent / "corpus", Path(__file__).resolve().parent / "scripts"
# script, its arguments, the line changed, what it becomes, the line a GPU stops at then
CASES = [
    ("mnist.py", ["--epochs", "1"], "data, target = data.to(device), target.to(device)",
     "data, target = data.to(device), target", "loss = F.nll_loss(output, target)"),
    ("vae.py", ["--epochs", "1"], "data = data.to(device)", "pass", "recon_batch, mu, logvar = model(data)"),
    ("cifar10_tutorial.py", [], "inputs, labels = data[0].to(device), data[1].to(device)",
     "inputs, labels = data[0].to(device), data[1]", "loss = criterion(outputs, labels)"),
    ("quickstart.py", [], "X, y = X.to(device), y.to(device)", "X, y = X.to(device), y", "loss = loss_fn(pred, y)"),
    ("pytorch_cifar.py", ["--epochs", "1"], "inputs, targets = inputs.to(device), targets.to(device)",
     "inputs, targets = inputs.to(device), targets", "loss = criterion(outputs, targets)"),
    ("train_gpu_1.py", [], "targets = targets.cuda()", "pass", "loss = loss_fn(outputs, targets)"),
    ("train_gpu_2.py", [], "imgs = imgs.to(device)", "pass", "outputs = tudui(imgs)"),
]
IDS = [case[0] for case in CASES]


def script(tmp_path, name, change=None):
    """The script in a folder of its own, with the first line ``change[0]`` (stripped) made ``change[1]``."""
    source = ((CORPUS if (CORPUS / name).exists() else SCRIPTS) / name).read_text(encoding="utf-8")
    if change:
        lines = source.splitlines(keepends=True)
        k = next(i for i, line in enumerate(lines) if line.strip() == change[0])
        lines[k] = lines[k][:len(lines[k]) - len(lines[k].lstrip())] + change[1] + "\n"
        source = "".join(lines)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / name).write_text(source, encoding="utf-8")
    return tmp_path / "code" / name, source


def rehearse(capsys, path, args):
    start = time.perf_counter()
    code = main(["rehearse", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err, time.perf_counter() - start


@pytest.mark.slow
@pytest.mark.parametrize("name, args, line, mutant, fails_at", CASES, ids=IDS)
def test_the_script_passes_as_it_is(capsys, tmp_path, name, args, line, mutant, fails_at):
    path, _ = script(tmp_path, name)
    code, out, err, seconds = rehearse(capsys, path, args)
    assert (code, err) == (0, ""), out
    assert "Rehearsal passed" in out and "thrown away" not in out  # a module's .to(device) alone is right
    assert sorted(p.name for p in path.parent.iterdir()) == [name]  # its saves stayed in the scratch copy
    print(f"{name}: rehearsed in {seconds:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize("name, args, line, mutant, fails_at", CASES, ids=IDS)
def test_a_move_left_out_is_named_at_the_line_a_gpu_stops_at(capsys, tmp_path, name, args, line, mutant, fails_at):
    path, source = script(tmp_path, name, (line, mutant))
    code, out, err, _ = rehearse(capsys, path, args)
    number = next(i for i, text in enumerate(source.splitlines(), 1) if text.strip() == fails_at)
    assert code == 1 and "same device" in out, out
    assert f"{name}, line {number}: {fails_at}" in out, out


@pytest.mark.slow
def test_dataparallel_copies_its_inputs_to_the_gpu_as_a_real_one_does(capsys, tmp_path):
    """kuangliu's script wraps the model in DataParallel on a GPU: its scatter moves the inputs, so only the
    targets must be moved by hand."""
    line = "inputs, targets = inputs.to(device), targets.to(device)"
    path, _ = script(tmp_path, "pytorch_cifar.py", (line, "targets = targets.to(device)"))
    code, out, err, _ = rehearse(capsys, path, ["--epochs", "1"])
    assert (code, err) == (0, ""), out


def test_the_corpus_is_listed_with_its_sources():
    listed = (CORPUS / "README.md").read_text(encoding="utf-8")
    for path in CORPUS.glob("*.py"):
        assert f"| {path.name} |" in listed
        assert path.read_text(encoding="utf-8").startswith("# Transcribed from ")
