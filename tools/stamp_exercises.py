"""Stamp each lesson's checked exercises (tudui/exercise/NN.json) at the end of both editions of lessons 01-08.

The stamped cells have ids starting with "checked-": a heading, the cell that loads the questions
(``ex = tudui.exercises("NN")``), then per question its text (markdown) and its starting code. A cell whose
source is unchanged keeps its outputs; the Chinese markdown cells record the English they translate (zh.en_sha).
Idempotent. Usage: python tools/stamp_exercises.py   (then re-execute the lessons: tools/execute_notebooks.py)
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat

from recordings import source_sha

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
EXERCISES = ROOT / "tudui" / "exercise"
PREFIX = "checked-"
INTRO = {
    "en": "## Checked exercises\n\n"
          "Run the next cell once. Then, in each exercise, replace every `____` with your answer and run the cell: "
          "`check()` says whether it is right and, if not, what is wrong; `hint()` gives a hint (call it again for "
          "the next one); `solution()` shows one answer. Where an exercise is about devices, the check runs your "
          "code on a pretend GPU (CPU tensors that behave like GPU ones, see lesson 06), so a CPU is all you need.",
    "zh": "## 练习（自动检查）\n\n"
          "先运行下一个单元格。然后在每道练习里把每个 `____` 换成你的答案，再运行这个单元格：`check()` 告诉你对不对，"
          "不对的话错在哪里；`hint()` 给一条提示（再调用一次给下一条）；`solution()` 给出一种答案。"
          "练习和设备有关时，检查会在一个模拟的 GPU 上运行你的代码（CPU 上的张量，行为却像 GPU 上的张量，见第 06 课），"
          "所以只有 CPU 就够了。",
}


def wanted_cells(lesson: str, lang: str) -> list:
    """(id, type, source) of the exercise cells of ``lesson`` in ``lang``."""
    questions = json.loads((EXERCISES / f"{lesson}.json").read_text(encoding="utf-8"))[lang]
    cells = [(f"{PREFIX}intro", "markdown", INTRO[lang]),
             (f"{PREFIX}load", "code", f'ex = tudui.exercises("{lesson}")\nex')]
    for name, texts in questions.items():
        cells += [(f"{PREFIX}{name}", "markdown", texts["question"]),
                  (f"{PREFIX}{name}-code", "code", texts["starter"])]
    return cells


def stamp(path: Path, lesson: str, lang: str, english=None) -> bool:
    """Put the exercise cells at the end of ``path``; True when the file changed."""
    nb = nbformat.read(path, as_version=4)
    old = {c.id: c for c in nb.cells if c.get("id", "").startswith(PREFIX)}
    cells = [c for c in nb.cells if not c.get("id", "").startswith(PREFIX)]
    for cell_id, kind, source in wanted_cells(lesson, lang):
        cell = old.get(cell_id)
        if cell is None or cell.cell_type != kind or cell.source != source:
            new = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
            cell = new(source, id=cell_id)
        if kind == "markdown" and english is not None:
            cell.metadata["zh"] = {"en_sha": source_sha(english[cell_id])}
        cells.append(cell)
    before = nbformat.writes(nb)
    nb.cells = cells
    if nbformat.writes(nb) == before:
        return False
    nbformat.write(nb, path)
    return True


def main() -> None:
    for exercises in sorted(EXERCISES.glob("[0-9][0-9].json")):
        lesson = exercises.stem
        for en_path in sorted(NOTEBOOKS.glob(f"{lesson}-*.ipynb")):
            english = {i: s for i, _, s in wanted_cells(lesson, "en")}
            for path, lang, en in ((en_path, "en", None), (NOTEBOOKS / "zh" / en_path.name, "zh", english)):
                if stamp(path, lesson, lang, en):
                    print(f"stamped {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
