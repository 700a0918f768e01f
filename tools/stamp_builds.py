"""Write the table of torch's CUDA builds (tudui/cli/builds.json, through table() below) into docs/install.md,
docs/install.zh.md and lesson 00 of both editions, between the markers <!-- builds --> and <!-- /builds -->.

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
DOCS = {ROOT / "docs" / "install.md": "en", ROOT / "docs" / "install.zh.md": "zh"}
LESSONS = {ROOT / "notebooks" / "00-your-machine.ipynb": "en", ROOT / "notebooks" / "zh" / "00-your-machine.ipynb": "zh"}
MARKED = re.compile(r"(<!-- builds -->\n)(?:.*?\n)?(<!-- /builds -->)", re.S)


def table(t: dict) -> str:
    """The Markdown table of what to install, by GPU and by the CUDA version nvidia-smi shows: docs/install.md and lesson 00."""
    columns = [((major, minor), label) for major, minor, label in builds.TABLE["driver_columns"]]
    head = [t["table_gpu"], *(label for _, label in columns)]
    rows = [head, ["---"] * len(head)]
    for gpu in builds.TABLE["gpus"]:
        cap, low, high = tuple(gpu["cap"]), gpu.get("oldest_driver_cuda"), gpu.get("newest_driver_cuda")
        drivers = [c for c, _ in columns if not (low and c < tuple(low) or high and c > tuple(high))]
        best = builds.choose(max(drivers), (cap,))
        cells = [f"{gpu['name']} ({gpu['caps']})"]
        for column, _ in columns:
            build = builds.choose(column, (cap,)) if column in drivers else None
            if build is None:
                cells.append(t["table_no_driver"] if column not in drivers else t["table_none"])
            elif build.torch != best.torch:
                cells.append(t["table_update"].format(build=f"`{build.torch}` {build.variant}", best=best.torch))
            else:
                last = t["table_last"] if build.torch != builds.newest() else ""
                cells.append(f"`{build.torch}` {build.variant}{last}")
        rows.append(cells)
    pairs = sorted({b for release in builds.releases() for b in release if f"`{b.torch}`" in str(rows)},
                   key=lambda b: builds.release_key(b.torch), reverse=True)
    paired = ", ".join(dict.fromkeys(f"`torch=={b.torch} torchvision=={b.torchvision}`" for b in pairs))
    body = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    return f"{body}\n\n{t['table_pairs'].format(pairs=paired, checked=builds.TABLE['checked'])}"


def stamped(text: str, lang: str) -> str:
    """``text`` with the table of ``lang`` between its markers (unchanged without markers)."""
    return MARKED.sub(lambda m: m.group(1) + table(doctor.texts(lang)) + "\n" + m.group(2), text)


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
    for path, lang in DOCS.items():
        text = path.read_text(encoding="utf-8")
        if stamped(text, lang) != text:
            path.write_text(stamped(text, lang), encoding="utf-8")
    stamp_lessons()


if __name__ == "__main__":
    main()
