"""What a Chinese lesson shows is Chinese: no English sentence from the package or from the lessons' own code in the
stored outputs of notebooks/zh/ (identifiers, commands, paths, units and quoted torch and Python messages aside)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHINESE = sorted((ROOT / "notebooks" / "zh").glob("[0-9][0-9]-*.ipynb"))
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
SENTENCE = re.compile(r"\b[A-Za-z]{2,}(?:[ ,;']+[A-Za-z]{2,}){3,}")  # four English words in a row
FIELD = re.compile(r"\{[^{}]*\}")
QUOTED = re.compile(  # what stays as it is: torch's and Python's own messages, commands, tracebacks, file names
    r"^\s*(\$ |python |torchrun |pip |\[|\S+\.py\b|Traceback|File \"|"
    r"(\w+\.)*(RuntimeError|TypeError|ValueError|AssertionError|OSError|ImportError|UnpicklingError|"
    r"AttributeError|KeyError|IndexError|NotImplementedError|AcceleratorError|OutOfMemoryError)\b|"
    r"WeightsUnpickler error|\w+Warning\b)")


def outputs(path):
    """(cell index, line) of every stored text output of a notebook."""
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            for line in (text if isinstance(text, str) else "".join(text)).splitlines():
                yield i, line


def english_templates():
    """The longest literal piece of each English text of the package that its Chinese text does not share."""
    tables = [json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / "tudui").rglob("*.json")
              if p.parent.name in ("text", "cli") and p.name != "builds.json"]
    pieces = set()
    for table in tables:
        for key, english in table.get("en", {}).items():
            if table.get("zh", {}).get(key) == english:
                continue
            piece = max(FIELD.split(english), key=len).strip()
            if SENTENCE.search(piece):
                pieces.add(piece)
    return sorted(pieces)


@pytest.mark.parametrize("path", CHINESE, ids=lambda p: p.name)
def test_no_english_text_of_the_package_in_a_chinese_lesson(path):
    pieces = english_templates()
    found = [f"cell {i}: {piece!r} in {line.strip()[:100]!r}" for i, line in outputs(path)
             for piece in pieces if piece in line]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", CHINESE, ids=lambda p: p.name)
def test_no_english_sentence_in_a_chinese_lesson(path):
    english = [f"cell {i}: {line.strip()[:110]!r}" for i, line in outputs(path)
               if SENTENCE.search(line) and not CJK.search(line) and not QUOTED.match(line)]
    assert not english, "\n".join(english)
