"""The front pages stay short and point to the docs; docs/cli.md and docs/cli.zh.md show every option as ``--help``
prints it (tools/stamp_cli_docs.py), and the two editions of each doc have the same sections."""
import re
from pathlib import Path

import pytest

import stamp_cli_docs

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [("README.md", "README.zh.md"), ("docs/cli.md", "docs/cli.zh.md"), ("docs/install.md", "docs/install.zh.md")]


@pytest.mark.parametrize("name", ["README.md", "README.zh.md"])
def test_a_front_page_is_at_most_150_lines_and_links_the_docs(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, f"{name}: {len(text.splitlines())} lines"
    zh = ".zh" if name.endswith(".zh.md") else ""
    assert f"docs/cli{zh}.md" in text and f"docs/install{zh}.md" in text


def test_the_cli_docs_show_every_option_as_help_prints_it():
    for path, lang in stamp_cli_docs.DOCS.items():
        doc = path.read_text(encoding="utf-8")
        assert stamp_cli_docs.stamped(doc, lang) == doc, f"{path.name}: run tools/stamp_cli_docs.py"


def test_a_changed_help_text_is_noticed(monkeypatch):
    path, lang = next(iter(stamp_cli_docs.DOCS.items()))
    doc = path.read_text(encoding="utf-8")
    monkeypatch.setattr(stamp_cli_docs, "options", lambda lang: "### `train`: something else\n")
    assert stamp_cli_docs.stamped(doc, lang) != doc


@pytest.mark.parametrize("en, zh", PAIRS)
def test_both_editions_have_the_same_sections(en, zh):
    def shape(name):
        prose = re.sub(r"^```.*?^```", "", (ROOT / name).read_text(encoding="utf-8"), flags=re.M | re.S)
        return [len(h) for h in re.findall(r"^(#+) ", prose, re.M)]
    assert shape(en) == shape(zh)


@pytest.mark.parametrize("name", ["README.md", "README.zh.md", "docs/cli.md", "docs/cli.zh.md", "docs/install.md",
                                  "docs/install.zh.md", "docs/maintainers.md", "benchmarks/README.md"])
def test_every_relative_link_goes_somewhere(name):
    path = ROOT / name
    for target in re.findall(r"\]\((?!https?:|#|mailto:)([^)#\s]+)", path.read_text(encoding="utf-8")):
        assert (path.parent / target).exists(), f"{name}: link {target} goes nowhere"
