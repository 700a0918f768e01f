"""The package's words: every text in English and Chinese with the same fields, and one setting that chooses."""
import json
import re
import string
from pathlib import Path

import pytest
import torch

import tudui
from tudui import text

PACKAGE = Path(__file__).resolve().parent.parent / "tudui"
TABLES = sorted((PACKAGE / "text").glob("*.json"))


def fields(template: str) -> list:
    """The {fields} of a template, each with its conversion and format spec, sorted."""
    return sorted((name, conversion or "", spec or "") for _, name, spec, conversion
                  in string.Formatter().parse(template) if name is not None)


def problems(table: dict) -> list:
    """What is wrong with a {"en": {key: text}, "zh": {key: text}} table."""
    found = [f"languages {sorted(table)}, not en and zh"] if sorted(table) != ["en", "zh"] else []
    en, zh = table.get("en", {}), table.get("zh", {})
    found += [f"{key}: no Chinese" for key in en.keys() - zh.keys()]
    found += [f"{key}: no English" for key in zh.keys() - en.keys()]
    for key in en.keys() & zh.keys():
        if not (isinstance(en[key], str) and en[key].strip() and isinstance(zh[key], str) and zh[key].strip()):
            found.append(f"{key}: an empty text (or not text)")
            continue
        try:
            if fields(en[key]) != fields(zh[key]):
                found.append(f"{key}: fields {fields(en[key])} in English, {fields(zh[key])} in Chinese")
        except ValueError as exc:
            found.append(f"{key}: not a template ({exc})")
    return found


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_text_has_its_twin_with_the_same_fields(path):
    assert problems(json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("table, problem", [
    ({"en": {"a": "x {n}"}, "zh": {}}, "a: no Chinese"),
    ({"en": {}, "zh": {"a": "x"}}, "a: no English"),
    ({"en": {"a": "{n:,} images"}, "zh": {"a": "{n} 张图片"}}, "a: fields [('n', '', ',')] in English, "
                                                              "[('n', '', '')] in Chinese"),
    ({"en": {"a": "{path!r}"}, "zh": {"a": "{file!r}"}}, "a: fields [('path', 'r', '')] in English, "
                                                         "[('file', 'r', '')] in Chinese"),
    ({"en": {"a": "x"}, "zh": {"a": " "}}, "a: an empty text (or not text)"),
    ({"en": {"a": "{"}, "zh": {"a": "{"}}, "a: not a template (Single '{' encountered in format string)"),
    ({"en": {}, "zh": {}, "fr": {}}, "languages ['en', 'fr', 'zh'], not en and zh"),
])
def test_the_check_finds_each_kind_of_problem(table, problem):
    assert problem in problems(table)


def test_a_key_lives_in_one_file_only():
    seen = {}
    for path in sorted((PACKAGE / "text").glob("*.json")):
        for key in json.loads(path.read_text(encoding="utf-8"))["en"]:
            assert key not in seen, f"{key} is in both {seen.get(key)} and {path.name}"
            seen[key] = path.name
    assert set(seen) == set(text.tables()["en"])


@pytest.fixture
def chosen():
    """set_language's choice is undone after the test."""
    yield
    text._chosen.clear()


def test_english_is_the_default(monkeypatch, chosen):
    monkeypatch.delenv("TUDUI_LANG", raising=False)
    assert tudui.language() == "en" and tudui.say("plots.seconds") == "seconds"


@pytest.mark.parametrize("value", ["zh", " ZH ", "Zh"])
def test_tudui_lang_chooses(monkeypatch, chosen, value):
    monkeypatch.setenv("TUDUI_LANG", value)
    assert tudui.language() == "zh" and tudui.say("plots.seconds") == "秒"


def test_set_language_wins_over_tudui_lang(monkeypatch, chosen):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    tudui.set_language("en")
    assert tudui.language() == "en"
    assert tudui.say("plots.seconds", "zh") == "秒"  # a language given to say wins over both


@pytest.mark.parametrize("value", ["cn", "chinese", "en_US.UTF-8"])
def test_an_unknown_tudui_lang_is_one_clear_error(monkeypatch, chosen, value):
    monkeypatch.setenv("TUDUI_LANG", value)
    with pytest.raises(ValueError) as error:
        tudui.say("plots.seconds")
    assert str(error.value) == f"TUDUI_LANG={value!r} is not understood; set it to en or zh, or unset it"


@pytest.mark.parametrize("value", ["cn", "", None, "EN"])
def test_set_language_refuses_what_it_does_not_know(chosen, value):
    with pytest.raises(ValueError, match=r"language must be one of en, zh, not "):
        tudui.set_language(value)
    assert text._chosen == []


def test_the_lessons_print_chinese_once_it_is_chosen(monkeypatch, chosen, capsys):
    """Every module of the lessons: a line of each in Chinese."""
    monkeypatch.setenv("TUDUI_LANG", "zh")
    with pytest.raises(tudui.DeviceError, match=r"^没有 'gpu' 这种设备；请从这些里选一个：auto, cpu"):
        tudui.pick_device("gpu")
    with pytest.raises(ValueError, match=r"^batch_size 必须是正整数，现在是 0$"):
        tudui.ResidentLoader(tudui.cifar10(source="synthetic", limit=4), batch_size=0)
    assert str(tudui.timing.Timing([0.02912, 0.03, 0.025])) == "29.12 ms（3 次的中位数）"
    monkeypatch.setenv("TUDUI_QUICK", "maybe")
    with pytest.raises(ValueError, match=r"^看不懂 TUDUI_QUICK='maybe'"):
        tudui.quick_mode()


def test_a_chinese_lesson_trains_in_chinese(monkeypatch, chosen):
    tudui.set_language("zh")
    train, test = tudui.cifar10(source="synthetic", limit=16), tudui.cifar10(False, source="synthetic", limit=8)
    model, lines = tudui.Tudui(), []
    tudui.fit(model, *tudui.loaders(train, test, batch_size=8, num_workers=0), torch.nn.CrossEntropyLoss(),
              torch.optim.SGD(model.parameters(), lr=0.01), "cpu", 1, progress=False, log=lines.append)
    assert len(lines) == 1 and re.fullmatch(r"第 1 轮：训练损失 \d\.\d{3}，测试损失 \d\.\d{3}，测试正确率 \d+\.\d%", lines[0])
    assert re.search(r"^CPU：\d+ 个逻辑核心，torch 用 \d+ 个线程$", tudui.describe_devices(), re.M)
