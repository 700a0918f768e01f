"""The Chinese edition (notebooks/zh/) in step with the English: the same cells and code, translations
of the English as it is now, links to the Chinese lessons, and the glossary's terms introduced."""
from __future__ import annotations

import copy
import posixpath
import re
from pathlib import Path

import nbformat
import pytest

from recordings import source_sha
from translate import en_sha, mark_translated, same_code, twin_of, update

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
GLOSSARY = NOTEBOOKS / "zh" / "GLOSSARY.md"
ENGLISH = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))

NAV = re.compile(r"<!-- nav -->.*?<!-- /nav -->", re.S)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)|href=[\"']([^\"']+)")
LESSON = re.compile(r"(?:^|/)(\d\d-[\w.-]*?\.ipynb)")
CJK = re.compile(r"[\u4e00-\u9fff]")


def read(path):
    return nbformat.read(path, as_version=4)


def tags(cell):
    return cell.metadata.get("tags", [])


# --- the checks, one line per problem, naming the Chinese cell -----------------------------------------

def cell_problems(en, zh, name) -> list:
    """Same cell ids, in the same order, with the same types and tags."""
    en_ids, zh_ids = [c.get("id") for c in en.cells], [c.get("id") for c in zh.cells]
    todo = "run tools/translate.py"
    problems = [f"{name} cell id {i}: only in the English; {todo}" for i in en_ids if i not in zh_ids]
    problems += [f"{name} cell id {i}: not in the English; {todo}" for i in zh_ids if i not in en_ids]
    if not problems and en_ids != zh_ids:
        k = next(k for k, (a, b) in enumerate(zip(en_ids, zh_ids)) if a != b)
        problems.append(f"{name} cell id {zh_ids[k]}: cell {k} here, but cell {k} of the English is id {en_ids[k]} "
                        f"(the cells are in another order); {todo}")
    english = {c.get("id"): c for c in en.cells}
    for cell in zh.cells:
        twin = english.get(cell.get("id"))
        if twin is not None and twin.cell_type != cell.cell_type:
            problems.append(f"{name} cell id {cell.id}: a {cell.cell_type} cell, the English a {twin.cell_type} cell")
        elif twin is not None and tags(twin) != tags(cell):
            problems.append(f"{name} cell id {cell.id}: tags {tags(cell)}, the English {tags(twin)}")
    return problems


def pairs(en, zh, cell_type):
    english = {c.get("id"): c for c in en.cells}
    return [(english[c.id], c) for c in zh.cells
            if c.cell_type == cell_type and c.get("id") in english and english[c.id].cell_type == cell_type]


def code_problems(en, zh, name) -> list:
    """The English code, but for comments and printed text (tools/translate.py's same_code)."""
    problems = []
    for english, chinese in pairs(en, zh, "code"):
        difference = same_code(english.source, chinese.source)
        if difference:
            problems.append(f"{name} cell id {chinese.id}: the code is not the English code ({difference}); "
                            "only comments and printed text may differ")
    return problems


def stale_problems(en, zh, name) -> list:
    """Each markdown cell translates the English cell as it is now (its metadata zh.en_sha)."""
    problems = []
    for english, chinese in pairs(en, zh, "markdown"):
        if en_sha(chinese) is None:
            problems.append(f"{name} cell id {chinese.id}: not translated yet (no zh.en_sha in its metadata)")
        elif en_sha(chinese) != source_sha(english.source):
            problems.append(f"{name} cell id {chinese.id}: the English cell changed since it was translated; update "
                            f"the translation, then: python tools/translate.py notebooks/{name.split('/')[-1]} "
                            f"--translated {chinese.id}")
    return problems


def links(source):
    return [a or b for a, b in LINK.findall(source)]


def link_problems(zh, path) -> list:
    """Links to lessons go to the Chinese ones (a relative link to the lesson's own English twin aside);
    relative links to other pages go to pages that exist."""
    problems, name = [], f"zh/{path.name}"
    for cell in zh.cells:
        for target in links(cell.source) if cell.cell_type == "markdown" else []:
            found = LESSON.search(target)
            local = target.split("#")[0].split("?")[0]
            if found and "://" in target:
                wrong = not target[:found.start(1)].rstrip("/").endswith("notebooks/zh")
            elif found:
                linked = posixpath.normpath(target[:found.end(1)])
                wrong = linked not in (found.group(1), f"../{path.name}")
            else:
                wrong = "://" not in local and local.endswith((".md", ".ipynb")) and not (path.parent / local).exists()
            if wrong:
                problems.append(f"{name} cell id {cell.get('id')}: link {target} "
                                + ("goes to an English lesson; link the Chinese one" if found else "goes nowhere"))
    return problems


def glossary_terms(path=GLOSSARY) -> list:
    """(English spellings, Chinese term) of the first table's terms that a test can check."""
    table = path.read_text(encoding="utf-8").split("\n## ")[1]  # the first section after the introduction
    terms = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("English", "---") or "测试不检查" in cells[2]:
            continue
        english, chinese = cells[0], cells[1]
        if len(chinese) >= 2 and all(CJK.match(ch) for ch in chinese):
            terms.append(([e.strip() for e in english.split("/")], chinese))
    return terms


def prose(nb) -> str:
    """The markdown a reader reads: without the nav, code, link targets and HTML tags."""
    text = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for pattern in (NAV, re.compile(r"```.*?```", re.S), re.compile(r"`[^`\n]*`"), re.compile(r"<[^>]*>")):
        text = pattern.sub("", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def term_problems(zh, path, terms) -> list:
    """Each glossary term, at its first use (in a heading or in the text), has its English in brackets."""
    text = prose(zh)
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    problems = []
    for english, chinese in terms:
        bracket = re.compile(re.escape(chinese) + r"[\u4e00-\u9fff]{0,3}\s*[（(]([^）)]*)[）)]")

        def introduced(where):
            match = bracket.match(where, where.find(chinese))
            return match is not None and any(e.lower() in match.group(1).lower() for e in english)
        if chinese in text and not introduced(text) and not (chinese in body and introduced(body)):
            first = (body if chinese in body else text).find(chinese)
            context = (body if chinese in body else text)[max(0, first - 10):first + 20].replace("\n", " ")
            problems.append(f"zh/{path.name}: the first {chinese} (…{context}…) needs its English in brackets: "
                            f"{chinese}（{english[0]}）")
    return problems


def problems_of(english: Path, chinese: Path, terms=()) -> list:
    en, zh, name = read(english), read(chinese), f"zh/{chinese.name}"
    return (cell_problems(en, zh, name) + code_problems(en, zh, name) + stale_problems(en, zh, name)
            + link_problems(zh, chinese) + term_problems(zh, chinese, terms))


# --- the real notebooks ----------------------------------------------------------------------------------

def twin(english: Path):
    chinese = twin_of(english)
    if not chinese.exists():
        pytest.skip(f"no {chinese.relative_to(ROOT)} (test_every_lesson_has_a_chinese_twin fails for it)")
    return read(english), read(chinese), f"zh/{chinese.name}"


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.name)
def test_every_lesson_has_a_chinese_twin(english):
    chinese = twin_of(english).relative_to(ROOT)
    assert twin_of(english).exists(), f"{chinese} is missing: python tools/translate.py {english.relative_to(ROOT)}"


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.name)
@pytest.mark.parametrize("problems_of", [cell_problems, code_problems, stale_problems],
                         ids=["same cells in the same order", "the English code", "the English as it is now"])
def test_the_twin_is_in_step(english, problems_of):
    problems = problems_of(*twin(english))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.name)
def test_the_twin_links_chinese_lessons(english):
    zh = twin(english)[1]
    problems = link_problems(zh, twin_of(english))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.name)
def test_the_twin_introduces_the_glossary_terms(english):
    zh = twin(english)[1]
    problems = term_problems(zh, twin_of(english), glossary_terms())
    assert not problems, "\n".join(problems)


def test_the_readme_links_the_chinese_edition_at_the_top():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "README.zh.md" in "\n".join(readme.splitlines()[:5]), "README.md: link README.zh.md at the top"


def test_the_glossary_has_the_series_terms():
    table = GLOSSARY.read_text(encoding="utf-8")
    for term in ["张量", "设备", "显卡", "显存", "检查点", "批量大小", "同步", "混合精度", "分布式数据并行", "数据加载器",
                 "工作进程", "锁页内存", "优化器", "轮", "吞吐量", "核函数", "驱动", "虚拟环境", "wheel 安装包", "进程组", "后端"]:
        assert f"| {term} |" in table, f"{GLOSSARY.relative_to(ROOT)} has no row for {term}"
    checked = [chinese for _, chinese in glossary_terms()]
    assert "张量" in checked and "显卡" not in checked and "轮" not in checked, checked


# --- the same checks on small notebooks, so that they can fail ----------------------------------------

def write(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def md(cell_id, source):
    return nbformat.v4.new_markdown_cell(source, id=cell_id)


def code(cell_id, source, cell_tags=()):
    cell = nbformat.v4.new_code_cell(source, id=cell_id)
    cell.metadata["tags"] = list(cell_tags)
    return cell


ENGLISH_CELLS = [md("m1", "# Lesson 1\n\nA tensor lives on a device. Next: [lesson 2](02-next.ipynb)."),
                 code("c1", 'x = 1  # one\nprint(f"x is {x:.1f}")'),
                 md("m2", "## On a GPU\n\nThe GPU line."),
                 code("c2", 'tudui.show_recorded("01-fixture", "k", "a GPU line.")', ["nbval-ignore-output"])]
CHINESE = {"m1": "# 第 1 课\n\n张量（tensor）放在某个设备（device）上。下一课：[第 2 课](02-next.ipynb)。",
           "c1": 'x = 1  # 一\nprint(f"x 是 {x:.1f}")',
           "m2": "## 在 GPU 上\n\nGPU 的那一行。",
           "c2": 'tudui.show_recorded("01-fixture", "k", "GPU 的那一行。", lang="zh")'}


@pytest.fixture
def editions(tmp_path):
    """An English lesson and its Chinese twin, made with tools/translate.py and translated: in step."""
    english = tmp_path / "01-fixture.ipynb"
    write(english, copy.deepcopy(ENGLISH_CELLS))
    update(english)
    chinese = twin_of(english)
    nb = read(chinese)
    for cell in nb.cells:
        cell.source = CHINESE[cell.id]
    nbformat.write(nb, chinese)
    mark_translated(english, ["m1", "m2"])
    assert problems_of(english, chinese, glossary_terms()) == []
    return english, chinese


def change_english(english, change):
    nb = read(english)
    change(nb.cells)
    nbformat.write(nb, english)


def test_a_fresh_twin_is_reported_untranslated_and_otherwise_in_step(tmp_path):
    english = tmp_path / "01-fixture.ipynb"
    write(english, copy.deepcopy(ENGLISH_CELLS))
    todo = update(english)
    assert [line.split(": ")[0] for line in todo] == [
        f"{twin_of(english)} cell id m1 (markdown)", f"{twin_of(english)} cell id c1 (code)",
        f"{twin_of(english)} cell id m2 (markdown)", f"{twin_of(english)} cell id c2 (code)", str(twin_of(english))]
    assert problems_of(english, twin_of(english)) == [
        "zh/01-fixture.ipynb cell id m1: not translated yet (no zh.en_sha in its metadata)",
        "zh/01-fixture.ipynb cell id m2: not translated yet (no zh.en_sha in its metadata)"]
    assert read(twin_of(english)).cells[3].source == CHINESE["c2"].replace("GPU 的那一行。", "a GPU line.")


def test_translate_is_idempotent(editions):
    english, chinese = editions
    before = chinese.read_bytes()
    assert update(english) == [] and chinese.read_bytes() == before


def test_a_changed_english_cell_names_the_chinese_cell_to_update(editions):
    english, chinese = editions
    change_english(english, lambda cells: setattr(cells[2], "source", "## On a GPU\n\nThe GPU lines."))
    expected = ("zh/01-fixture.ipynb cell id m2: the English cell changed since it was translated; update the "
                "translation, then: python tools/translate.py notebooks/01-fixture.ipynb --translated m2")
    assert problems_of(english, chinese) == [expected]
    assert update(english) == [f"{chinese} cell id m2 (markdown): the English cell changed since it was translated: "
                               "update it, then mark it with --translated"]
    assert read(chinese).cells[2].source == CHINESE["m2"]  # the translation is kept until it is updated
    mark_translated(english, ["m2"])
    assert problems_of(english, chinese) == []


def test_an_added_cell_fails_until_translate_puts_it_in(editions):
    english, chinese = editions
    change_english(english, lambda cells: cells.insert(1, md("m9", "A new paragraph.")))
    assert problems_of(english, chinese) == [
        "zh/01-fixture.ipynb cell id m9: only in the English; run tools/translate.py"]
    update(english)
    assert [c.id for c in read(chinese).cells] == ["m1", "m9", "c1", "m2", "c2"]
    assert problems_of(english, chinese) == ["zh/01-fixture.ipynb cell id m9: not translated yet (no zh.en_sha in its metadata)"]


def test_a_removed_cell_fails_until_translate_drops_it(editions):
    english, chinese = editions
    change_english(english, lambda cells: cells.pop(2))
    assert problems_of(english, chinese) == ["zh/01-fixture.ipynb cell id m2: not in the English; run tools/translate.py"]
    update(english)
    assert problems_of(english, chinese) == []


def test_reordered_cells_fail_until_translate_reorders_them(editions):
    english, chinese = editions
    change_english(english, lambda cells: cells.insert(1, cells.pop(2)))
    assert problems_of(english, chinese) == [
        "zh/01-fixture.ipynb cell id c1: cell 1 here, but cell 1 of the English is id m2 (the cells are in another "
        "order); run tools/translate.py"]
    update(english)
    assert problems_of(english, chinese) == [] and read(chinese).cells[2].source == CHINESE["c1"]


def test_a_changed_tag_fails_until_translate_copies_it(editions):
    english, chinese = editions
    change_english(english, lambda cells: cells[1].metadata.update(tags=["nbval-skip"]))
    assert problems_of(english, chinese) == ["zh/01-fixture.ipynb cell id c1: tags [], the English ['nbval-skip']"]
    update(english)
    assert problems_of(english, chinese) == []


def test_a_changed_code_token_fails_in_either_edition(editions):
    english, chinese = editions
    nb = read(chinese)
    nb.cells[1].source = CHINESE["c1"].replace("x = 1", "x = 2")
    nbformat.write(nb, chinese)
    assert problems_of(english, chinese) == [
        "zh/01-fixture.ipynb cell id c1: the code is not the English code (English line 1 '1' vs Chinese line 1 '2'); "
        "only comments and printed text may differ"]
    change_english(english, lambda cells: setattr(cells[1], "source", ENGLISH_CELLS[1].source.replace("x = 1", "x = 2")))
    assert problems_of(english, chinese) == []  # the same code again
    change_english(english, lambda cells: setattr(cells[1], "source", ENGLISH_CELLS[1].source.replace(".1f", ".2f")))
    assert "cell id c1: the code is not the English code" in problems_of(english, chinese)[0]
    assert update(english) == [f"{chinese} cell id c1 (code): the code changed, so the English cell was taken: "
                               "translate its comments and printed text",
                               f"{chinese}: updated; re-execute it: python tools/execute_notebooks.py {chinese}"]
    assert problems_of(english, chinese) == [] and read(chinese).cells[1].source == read(english).cells[1].source


@pytest.mark.parametrize("english, chinese", [
    ('x = 1  # one\nprint("hello", x)', 'x = 1  # 一\nprint("你好", x)'),
    ("# a comment\nx = 1", "# 一行注释\n# 又一行\nx = 1"),
    ('print(f"loss {loss:.3f} at {i}")', 'print(f"第 {i} 步的损失 {loss:.3f}")'),
    ('print("a "\n      "b", x, sep="")', 'print("甲"\n      "乙", x, sep="")'),
    ('if ok:\n    !nvidia-smi\nelse:\n    print("none")', 'if ok:\n    !nvidia-smi\nelse:\n    print("没有")'),
    ('tudui.show_recorded("01-x", "k",\n                    "the GPU line.")',
     'tudui.show_recorded("01-x", "k",\n                    "GPU 的那一行。", lang="zh")'),
    ('doctor.run(steps=STEPS)', 'doctor.run(steps=STEPS, lang="zh")'),
    ('advice = doctor.advise(build, smi, "Windows")', 'advice = doctor.advise(build, smi, "Windows", lang="zh")'),
    ('run([sys.executable, "-m", "tudui", "doctor"], text=True)',
     'run([sys.executable, "-m", "tudui", "doctor", "--lang", "zh"], text=True)'),
    ('raise RuntimeError(f"failed with exit code {code}")', 'raise RuntimeError(f"出错退出，退出码 {code}")'),
])
def test_comments_and_printed_text_may_differ(english, chinese):
    assert same_code(english, chinese) is None


@pytest.mark.parametrize("english, chinese", [
    ('print(f"loss {loss:.3f}")', 'print(f"损失 {loss:.2f}")'),         # an f-string's format
    ('print(f"loss {loss}")', 'print(f"损失 {loss + 1}")'),             # an f-string's expression
    ('name = "loss"', 'name = "损失"'),                                  # a string that is not printed
    ('print("a", end="")', 'print("甲", end="\\n")'),                    # print's keywords
    ('print(describe("x"))', 'print(describe("叉"))'),                   # a string passed to another call
    ("x = 1", "x=1"),                                                  # whitespace
    ("x = 1\ny = 2", "x = 1\n\ny = 2"),                                # a blank line
    ('tudui.show_recorded("01-x", "k", "the GPU line.")',              # lang="zh" left out
     'tudui.show_recorded("01-x", "k", "GPU 的那一行。")'),
    ('tudui.show_recorded("01-x", "k", "the GPU line.")',              # the recording's key
     'tudui.show_recorded("01-x", "键", "GPU 的那一行。", lang="zh")'),
    ("!nvidia-smi", "!nvidia-smi -L"),                                 # a shell command
    ("doctor.run(steps=STEPS)", "doctor.run(steps=STEPS)"),            # the doctor in English
    ('run(["python", "-m", "tudui", "doctor"])', 'run(["python", "-m", "tudui", "doctor"])'),
    ('run(["python", "-m", "tudui", "doctor"])', 'run(["python", "-m", "tudui", "doctor", "--lang", "en"])'),
    ('run(["tudui", "train"])', 'run(["tudui", "train", "--lang", "zh"])'),  # only the doctor has --lang
    ('subprocess.run(["ls"])', 'subprocess.run(["ls"], lang="zh")'),  # a run that is not the doctor's
    ('raise RuntimeError(f"code {code}")', 'raise RuntimeError(f"退出码 {code + 1}")'),  # a message's expression
])
def test_anything_else_in_a_code_cell_may_not(english, chinese):
    assert same_code(english, chinese) is not None


def test_links_go_to_chinese_lessons(editions):
    english, chinese = editions
    nb = read(chinese)
    nb.cells[0].source += ("\n[English](../01-fixture.ipynb) [第 2 课](../02-next.ipynb) [README](../README.md)"
                           " [Colab](https://colab.research.google.com/github/o/r/blob/main/notebooks/01-fixture.ipynb)"
                           " [Colab](https://colab.research.google.com/github/o/r/blob/main/notebooks/zh/01-fixture.ipynb)")
    nbformat.write(nb, chinese)
    assert link_problems(read(chinese), chinese) == [
        "zh/01-fixture.ipynb cell id m1: link ../02-next.ipynb goes to an English lesson; link the Chinese one",
        "zh/01-fixture.ipynb cell id m1: link ../README.md goes nowhere",
        "zh/01-fixture.ipynb cell id m1: link https://colab.research.google.com/github/o/r/blob/main/notebooks/"
        "01-fixture.ipynb goes to an English lesson; link the Chinese one"]


@pytest.mark.parametrize("text, fails", [
    ("张量（tensor）放在设备（device）上。张量……", False),
    ("## 张量（tensor）\n\n张量放在设备 (device) 上。", False),   # first use in a heading
    ("张量放在设备（device）上。张量（tensor）……", True),          # brackets only at the second use
    ("张量（Tensor）放在设备上。设备（device）……", True),
    ("放在 `张量` 里：张量（tensor）在设备上（device）。", False),  # code is not prose; 3 characters between
    ("只讲张量（tensor）。", False),                              # a term not used needs nothing
])
def test_the_first_use_of_a_glossary_term_carries_its_english(tmp_path, text, fails):
    path = tmp_path / "zh" / "01-fixture.ipynb"
    write(path, [md("m1", text)])
    problems = term_problems(read(path), path, glossary_terms())
    assert bool(problems) == fails, problems
