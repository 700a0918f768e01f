"""Write every command's options, as ``python -m tudui CMD --help`` prints them, into docs/cli.md (English) and
docs/cli.zh.md (``--lang zh``), between the markers <!-- options --> and <!-- /options -->.

Idempotent. Usage: python tools/stamp_cli_docs.py   (tests/test_docs.py checks that nothing is left to stamp)
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from tudui import text
from tudui.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = {ROOT / "docs" / "cli.md": "en", ROOT / "docs" / "cli.zh.md": "zh"}
MARKED = re.compile(r"(<!-- options -->\n)(?:.*?\n)?(<!-- /options -->)", re.S)
HEAD = {"en": "| option | what it does |", "zh": "| 选项 | 作用 |"}


def _row(action) -> str:
    name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
    return f"| {name} | {action.help.replace('|', '/')} |"


def options(lang: str) -> str:
    """The Markdown of every command's options in ``lang``, from the parser itself."""
    chosen = list(text._chosen)
    text.set_language(lang)
    try:
        parser = build_parser()
    finally:
        text._chosen[:] = chosen
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in commands._choices_actions}
    blocks = []
    for name, sub in commands.choices.items():
        rows = [_row(a) for a in sub._actions if a.help not in (None, argparse.SUPPRESS)]
        blocks.append("\n".join([f"### `{name}`: {helps[name]}", "", HEAD[lang], "| --- | --- |", *rows]))
    return "\n\n".join(blocks) + "\n"


def stamped(doc: str, lang: str) -> str:
    return MARKED.sub(lambda m: m.group(1) + options(lang) + m.group(2), doc)


def main() -> None:
    for path, lang in DOCS.items():
        doc = path.read_text(encoding="utf-8")
        if stamped(doc, lang) != doc:
            path.write_text(stamped(doc, lang), encoding="utf-8")


if __name__ == "__main__":
    main()
