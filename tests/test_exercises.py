"""The checked exercises, tested as learntools tests its courses: for every question of every lesson, in both
languages, the solution we show passes, the untouched placeholder is "not attempted", and plausible wrong answers
fail with the message meant for them. The learner's code runs from a file, as a notebook cell's does."""
import importlib.util
import json
import re
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import tudui
from tudui import exercise
from tudui.exercise import ____

FOLDER = Path(exercise.__file__).parent
LESSONS = sorted(p.stem for p in FOLDER.glob("[0-9][0-9].json"))
QUESTIONS = [(lesson, q) for lesson in LESSONS for q in json.loads((FOLDER / f"{lesson}.json").read_text("utf-8"))["en"]]


def learner(tmp_path, source):
    """The functions of ``source`` as a learner's cell defines them (from a file: its lines can be named)."""
    path = tmp_path / f"cell{abs(hash(source))}.py"
    path.write_text("import time\nimport torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n"
                    "import tudui\nloss_fn = nn.CrossEntropyLoss()\n" + source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


def question(lesson, q, lang="en"):
    tudui.set_language(lang)
    return getattr(tudui.exercises(lesson), q)


def solution_code(texts) -> str:
    return re.search(r"```python\n(.*?)```", texts["solution"], re.S).group(1)


def answer(tmp_path, lesson, q, source=None, lang="en"):
    """The outcome of the solution (or of ``source``) for the question."""
    question_ = question(lesson, q, lang)
    if "choices" in question_.texts:
        return question_.outcome(source or question_.texts["answer"])
    names = learner(tmp_path, source or solution_code(question_.texts))
    return question_.outcome(**{n: names[n] for n in question_.texts["names"]})


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson, q", QUESTIONS)
def test_the_solution_passes_and_the_placeholder_is_not_attempted(tmp_path, lesson, q, lang):
    start = time.perf_counter()
    assert answer(tmp_path, lesson, q, lang=lang).kind == "correct"
    assert time.perf_counter() - start < 30, "a check takes a second or two on a laptop (30 s: a loaded machine)"
    untouched = question(lesson, q, lang)
    outcome = untouched.outcome(____)
    said = untouched._say(outcome.key, **outcome.fields)
    assert outcome.kind == "unattempted" and "`____` in `____`" not in said and "`____` 里的 `____`" not in said
    # it says where the blank is: in check(____) for a letter, else in the function the question asks for
    assert "check(____)" in said if "choices" in untouched.texts else f"`{untouched.texts['names'][0]}`" in said
    starter = untouched.texts["starter"]
    assert "____" in starter and f"ex.{q}.check(" in starter
    compile(starter, f"{lesson} {q}", "exec")  # a starting cell runs before it is filled in: Run All never stops


@pytest.mark.parametrize("lesson, q", [(lesson, q) for lesson, q in QUESTIONS if "choices" in exercise.texts(lesson, "en")[q]])
def test_every_wrong_choice_is_explained(tmp_path, lesson, q):
    texts = question(lesson, q).texts
    for letter in set(texts["choices"]) - {texts["answer"]}:
        outcome = answer(tmp_path, lesson, q, letter)
        assert (outcome.kind, outcome.key) == ("incorrect", f"why_{letter}") and texts[f"why_{letter}"]
    assert answer(tmp_path, lesson, q, "z").key == "not_a_choice"


WRONG = [  # (lesson, question, a plausible wrong answer, the message it gets)
    ("01", "q1", "def test_loop(model, loader, loss_fn):\n    correct = images = 0\n    for x, y in loader:\n"
                 "        correct += (model(x).argmax(1) == y).sum().item()\n        images += len(y)\n"
                 "    return correct / images\n", "grad_on"),
    ("01", "q1", "def test_loop(model, loader, loss_fn):\n    with torch.no_grad():\n"
                 "        return sum((model(x).argmax(1) == y).sum() for x, y in loader) / 24\n", "not_a_float"),
    ("02", "q1", "def train_step(model, imgs, targets, loss_fn, optimizer):\n    imgs = imgs.cuda()\n"
                 "    loss = loss_fn(model(imgs), targets)\n    optimizer.zero_grad()\n    loss.backward()\n"
                 "    optimizer.step()\n", "on_cpu"),
    ("02", "q1", "def train_step(model, imgs, targets, loss_fn, optimizer):\n"
                 "    loss_fn(model(imgs.cuda()), targets.cuda())\n", "not_trained"),
    ("02", "q2", "def make_loss(weight):\n    return nn.CrossEntropyLoss(weight=weight)\n", "weight_on_cpu"),
    ("03", "q1", "def move(x, device):\n    x.to(device)\n    return x\n", "discarded"),
    ("03", "q2", "def run_epoch(model, loader, loss_fn, device, optimizer=None):\n    total = 0\n"
                 "    for imgs, targets in loader:\n        imgs, targets = imgs.to(device), targets.to(device)\n"
                 "        loss = loss_fn(model(imgs), targets)\n        total += loss.item()\n    return total\n", "reads"),
    ("04", "q1", "def load_weights(path):\n    return torch.load(path)\n", "no_map_location"),
    ("04", "q2", "def load_course_model(path):\n    return torch.load(path, map_location='cpu')\n", "weights_only"),
    ("04", "q3", "def resume(path, device):\n    checkpoint = torch.load(path, map_location=device)\n"
                 "    model = tudui.Tudui()\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
                 "    model.load_state_dict(checkpoint['model'])\n    optimizer.load_state_dict(checkpoint['optimizer'])\n"
                 "    model.to(device)\n    return model, optimizer\n", "state_on_cpu"),
    ("05", "q2", "def pick_device():\n    return torch.device('cuda')\n", "no_fallback"),
    ("05", "q2", "def pick_device():\n    return torch.device('cpu')\n", "no_gpu_taken"),
    ("06", "q1", "def to_numpy(t):\n    return t.cpu().numpy()\n", "learner_error"),
    ("06", "q3", "def predict(model, imgs, device):\n    return model(imgs).argmax(1).tolist()\n", "on_cpu"),
    ("07", "q1", "def time_gpu(fn, device):\n    start = time.perf_counter()\n    fn()\n"
                 "    return time.perf_counter() - start\n", "no_sync_before"),
    ("07", "q1", "def time_gpu(fn, device):\n    torch.cuda.synchronize()\n    start = time.perf_counter()\n    fn()\n"
                 "    return time.perf_counter() - start\n", "no_sync_after"),
    ("07", "q2", "def train_epoch(model, optimizer, batches, device):\n    total = 0.0\n    for imgs, targets in batches:\n"
                 "        loss = loss_fn(model(imgs), targets)\n        total += loss.item()\n    return total\n", "reads"),
    ("07", "q3", "def make_loader(dataset):\n    return DataLoader(dataset, batch_size=64, shuffle=True)\n", "not_pinned"),
    ("08", "q1", "def save_on_rank0(model, rank, path):\n    torch.save(model.module.state_dict(), path)\n",
     "every_rank_saves"),
    ("08", "q1", "def save_on_rank0(model, rank, path):\n    if rank == 0:\n        torch.save(model.state_dict(), path)\n",
     "prefix"),
    ("08", "q1", "def save_on_rank0(model, rank, path):\n    if rank == 0:\n        torch.save(model.module, path)\n",
     "not_a_state_dict"),
]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson, q, source, key", WRONG, ids=[f"{w[0]}-{w[1]}-{w[3]}" for w in WRONG])
def test_a_wrong_answer_gets_its_message(tmp_path, lesson, q, source, key, lang):
    outcome = answer(tmp_path, lesson, q, source, lang)
    assert (outcome.kind, outcome.key) == ("incorrect", key)
    text = question(lesson, q, lang)._say(outcome.key, **outcome.fields)
    assert text and "{" not in text


def test_every_question_has_a_wrong_answer_tested():
    checked = {(lesson, q) for lesson, q in QUESTIONS if "choices" not in question(lesson, q).texts}
    assert checked <= {(lesson, q) for lesson, q, *_ in WRONG}


def test_targets_left_on_the_cpu_are_named_at_the_learners_line(tmp_path):
    source = solution_code(question("03", "q2").texts).replace("imgs.to(device), targets.to(device)",
                                                                "imgs.to(device), targets")
    outcome = answer(tmp_path, "03", "q2", source)
    assert outcome.key == "on_cpu" and outcome.fields["names"] == "targets"
    assert outcome.fields["code"] == "loss = loss_fn(model(imgs), targets)"
    assert outcome.fields["line"] == 6 + source.splitlines().index("        loss = loss_fn(model(imgs), targets)") + 1
    tudui.set_language("zh")
    said = question("03", "q2", "zh")._say(outcome.key, **outcome.fields)
    assert f"第 {outcome.fields['line']} 行" in said and "`targets`" in said


def test_an_error_in_the_learners_code_is_the_learners_at_their_line(tmp_path):
    outcome = answer(tmp_path, "03", "q1", "def move(x, device):\n    y = x.to(device)\n    return z\n")
    assert outcome.key == "learner_error" and outcome.fields["code"] == "return z" and "NameError" in outcome.fields["error"]


def test_both_editions_ask_the_same_questions():
    for lesson in LESSONS:
        tables = json.loads((FOLDER / f"{lesson}.json").read_text("utf-8"))
        assert list(tables["en"]) == list(tables["zh"]), lesson
        for q in tables["en"]:
            assert set(tables["en"][q]) == set(tables["zh"][q]), (lesson, q)
            for key in ("names", "choices", "answer"):
                assert tables["en"][q].get(key) == tables["zh"][q].get(key), (lesson, q, key)
            assert len(tables["en"][q]["hints"]) == len(tables["zh"][q]["hints"]) >= 2


def test_check_reads_the_callers_globals_and_shows_one_message(capsys):
    ex = tudui.exercises("03")
    assert globals()["____"] is ____
    global move

    def move(x, device):
        return x.to(device)
    ex.q1.check()
    assert capsys.readouterr().out.startswith("Correct: ")
    ex.q1.check(move=lambda x, device: x)
    assert capsys.readouterr().out.startswith("Not yet: ")
    ex.q1.hint()
    assert "hint 2" in capsys.readouterr().out


def test_a_wrong_lesson_or_question_is_one_clear_line():
    with pytest.raises(ValueError, match="lesson number"):
        tudui.exercises("99")
    with pytest.raises(AttributeError, match="q1, q2, q3"):
        tudui.exercises("03").q9


def test_the_checks_leave_no_files_behind(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    monkeypatch.chdir(tmp_path)
    for lesson, q in QUESTIONS:
        answer(code, lesson, q)
    assert [p.name for p in tmp_path.iterdir()] == ["code"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_both_editions_of_the_lesson_end_with_its_checked_exercises(lesson):
    """tools/stamp_exercises.py put them there; stored outputs show the "not attempted" state (Run All never stops)."""
    notebooks = FOLDER.parent.parent / "notebooks"
    for lang, pattern in (("en", f"{lesson}-*.ipynb"), ("zh", f"zh/{lesson}-*.ipynb")):
        path = next(notebooks.glob(pattern))
        cells = {c["id"]: c for c in json.loads(path.read_text("utf-8"))["cells"]}
        for q, texts in exercise.texts(lesson, lang).items():
            code = cells.get(f"checked-{q}-code")
            assert code and "".join(code["source"]) == texts["starter"], f"{path.name}: run tools/stamp_exercises.py"
            shown = json.dumps(code["outputs"], ensure_ascii=False)
            assert ("Not attempted:" if lang == "en" else "还没有作答：") in shown, f"{path.name} {q}: re-execute it"
