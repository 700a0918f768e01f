"""Write the table of torch's CUDA builds (tudui/cli/builds.json, through tudui.cli.builds.table) into README.md,
README.zh.md and lesson 00 of both editions, between the markers <!-- builds --> and <!-- /builds -->.

Idempotent. A Chinese cell that was in step with its English before keeps its record of the English it translates
(zh.en_sha). Usage: python tools/stamp_builds.py   (tests/test_builds.py checks that nothing is left to stamp)
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from recordings import source_sha
from tudui.cli import builds, doctor

ROOT = Path(__file__).resolve().parent.parent
READMES = {ROOT / "README.md": "en", ROOT / "README.zh.md": "zh"}
LESSONS = {ROOT / "notebooks" / "00-your-machine.ipynb": "en", ROOT / "notebooks" / "zh" / "00-your-machine.ipynb": "zh"}
MARKED = re.compile(r"(<!-- builds -->\n)(?:.*?\n)?(<!-- /builds -->)", re.S)


def stamped(text: str, lang: str) -> str:
    """``text`` with the table of ``lang`` between its markers (unchanged without markers)."""
    return MARKED.sub(lambda m: m.group(1) + builds.table(doctor.texts(lang)) + "\n" + m.group(2), text)


def stamp_lessons() -> None:
    books = {path: nbformat.read(path, as_version=4) for path in LESSONS}
    english, chinese = books.values()
    twins = {c.get("id"): c for c in chinese.cells}
    for cell in english.cells:
        twin = twins.get(cell.get("id"))
        in_step = twin is not None and twin.metadata.get("zh", {}).get("en_sha") == source_sha(cell.source)
        cell.source = stamped(cell.source, "en")
        if twin is not None:
            twin.source = stamped(twin.source, "zh")
            if in_step:
                twin.metadata["zh"]["en_sha"] = source_sha(cell.source)
    for path, book in books.items():
        if nbformat.writes(book) != path.read_text(encoding="utf-8"):
            nbformat.write(book, path)


def main() -> None:
    for path, lang in READMES.items():
        text = path.read_text(encoding="utf-8")
        if stamped(text, lang) != text:
            path.write_text(stamped(text, lang), encoding="utf-8")
    stamp_lessons()


if __name__ == "__main__":
    main()
