"""Stamp badges, navigation links and the setup cell into every notebook of both editions, and the lesson
tables into the READMEs.

The English lessons are notebooks/NN-name.ipynb, their Chinese twins notebooks/zh/NN-name.ipynb. Each
first cell gets, between markers, badges that open it on Colab, Kaggle and Binder, links to the previous
and next lesson of its edition and a link to its twin; the second cell is the setup cell (the Chinese one
has the same code with Chinese comments). README.md's lesson table lists the English lessons,
README.zh.md's the Chinese ones (with a column linking the English). A missing Chinese twin is skipped
(the English is linked in its place in README.zh.md). When a first cell's nav changes, its twin's
record of the English it translates (zh.en_sha) follows, if it was in step before.

Idempotent: running it twice changes nothing. Only the first (markdown) cell and the setup cell of a
notebook are touched. Usage: python tools/stamp_notebooks.py [NOTEBOOK ...]
(default: all; a Chinese twin is stamped with its English; links always come from the full lists;
the READMEs are stamped on every run).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from notebook_settings import BRANCH, REPO
from recordings import source_sha

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
READMES = [ROOT / "README.md", ROOT / "README.zh.md"]
NAV_START, NAV_END = "<!-- nav -->", "<!-- /nav -->"
SETUP_MARK = "# Setup:"
SETUP_MARK_ZH = "# 设置："
EARLIER_MARKS = ("# Colab setup", "# Colab 设置")  # setup cells stamped before, replaced in place
DEFAULT_SOURCE = f"git+https://github.com/{REPO}@{BRANCH}"

SETUP = f'''{SETUP_MARK} installs the lessons' package `tudui` where it is missing (Colab, Kaggle, ...); never torch.
# GitHub slow or blocked? Set TUDUI_SOURCE to another git URL, a folder or a downloaded ZIP (notebook 05).
import importlib.metadata, importlib.util, os, subprocess, sys, tempfile
SOURCE = os.environ.get("TUDUI_SOURCE") or "{DEFAULT_SOURCE}"
os.environ["TUDUI_LANG"] = "en"             # tudui prints, raises and plots in English in this lesson

def install_tudui(source):
    if importlib.util.find_spec("tudui"):
        return "tudui is installed"
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "torch is missing: install it first (notebook 00), then run this cell again"
    if os.path.exists(source):
        source = os.path.abspath(source)    # a folder or a ZIP here
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pin:
        pin.write(f"torch=={{torch_version}}\\n")  # pip may add what tudui needs, but no other torch
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", pin.name, source],
                         capture_output=True, text=True)
    os.remove(pin.name)
    if pip.returncode:
        lines = pip.stderr.strip().splitlines() or ["pip failed"]
        why = ([line for line in lines if line.startswith("ERROR")] or lines)[-1]
        return (f"could not install tudui from {{source}}: {{why}}\\n"
                "No GitHub here? Get the repository's ZIP from anyone who has it, unpack it, put "
                "%env TUDUI_SOURCE=<the unpacked folder> in a cell above this one and run both (notebook 05)")
    importlib.invalidate_caches()           # so that `import tudui` finds it in this kernel
    return f"installed tudui from {{source}}; torch {{torch_version}} kept"

print(install_tudui(SOURCE))'''

ZH = {  # the Chinese setup cell: the English code, its comments and what it prints in Chinese
    f"{SETUP_MARK} installs the lessons' package `tudui` where it is missing (Colab, Kaggle, ...); never torch.":
        f"{SETUP_MARK_ZH}在缺少课程的包 `tudui` 的地方（Colab、Kaggle 等）安装它；从不安装 torch。",
    "# GitHub slow or blocked? Set TUDUI_SOURCE to another git URL, a folder or a downloaded ZIP (notebook 05).":
        "# GitHub 很慢或者打不开？把 TUDUI_SOURCE 设成别的 git 地址、一个文件夹或下载的 ZIP（第 05 课）。",
    'os.environ["TUDUI_LANG"] = "en"             # tudui prints, raises and plots in English in this lesson':
        'os.environ["TUDUI_LANG"] = "zh"             # 这一课里 tudui 打印的信息、报的错和画的图都用中文',
    '"tudui is installed"': '"tudui 已经装好了"',
    '"torch is missing: install it first (notebook 00), then run this cell again"':
        '"还没有安装 torch：请先安装它（第 00 课），再运行这个单元格"',
    "# a folder or a ZIP here": "# 本机上的文件夹或 ZIP",
    "# pip may add what tudui needs, but no other torch": "# pip 可以装 tudui 需要的包，但不能换掉 torch",
    '["pip failed"]': '["pip 没有成功"]',
    'f"could not install tudui from {source}: {why}\\n"': 'f"没能从 {source} 安装 tudui：{why}\\n"',
    '"No GitHub here? Get the repository\'s ZIP from anyone who has it, unpack it, put "':
        '"连不上 GitHub？找有这个仓库 ZIP 的人要一份，解压，在这个单元格上面加一个单元格写上 "',
    '"%env TUDUI_SOURCE=<the unpacked folder> in a cell above this one and run both (notebook 05)")':
        '"%env TUDUI_SOURCE=<解压出来的文件夹>，再依次运行这两个单元格（第 05 课）")',
    "# so that `import tudui` finds it in this kernel": "# 让这个内核里的 `import tudui` 找得到它",
    'f"installed tudui from {source}; torch {torch_version} kept"':
        'f"已从 {source} 安装 tudui；torch {torch_version} 保持不变"',
}


def translated_setup():
    source = SETUP
    for english, chinese in ZH.items():
        assert source.count(english) == 1, f"the setup cell has no {english!r}"
        source = source.replace(english, chinese)
    return source


SETUP_ZH = translated_setup()

BADGES = {
    "Colab": "https://colab.research.google.com/assets/colab-badge.svg",
    "Kaggle": "https://kaggle.com/static/images/open-in-kaggle.svg",
    "Binder": "https://mybinder.org/badge_logo.svg",
}
# The words of each edition: badge text, the README link of the first and last lesson, the twin's link.
WORDS = {
    "en": {"open": "Open in {}", "readme": ("README", "../README.md"), "twin": "中文", "setup": SETUP,
           "setup_prints": "tudui is installed\n"},  # what it prints where tudui is installed (the test configuration)
    "zh": {"open": "在 {} 中打开", "readme": ("课程目录", "../../README.zh.md"), "twin": "English", "setup": SETUP_ZH,
           "setup_prints": "tudui 已经装好了\n"},
}


def edition(name) -> str:
    """'zh' for a Chinese lesson (``zh/NN-name.ipynb``, relative to notebooks/), else 'en'."""
    return "zh" if str(name).startswith("zh/") else "en"


# ``name``: a lesson's path relative to notebooks/: "01-cpu-baseline.ipynb" or "zh/01-cpu-baseline.ipynb".
def colab_url(name):
    return f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/notebooks/{name}"


def kaggle_url(name):
    return f"https://kaggle.com/kernels/welcome?src=https://github.com/{REPO}/blob/{BRANCH}/notebooks/{name}"


def binder_url(name):
    return f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?urlpath=lab/tree/notebooks/{name}"


def badges(name):
    """Markdown badges that open lesson ``name`` on Colab, Kaggle and Binder, in that order."""
    urls = {"Colab": colab_url(name), "Kaggle": kaggle_url(name), "Binder": binder_url(name)}
    words = WORDS[edition(name)]["open"]
    return [f"[![{words.format(host)}]({BADGES[host]})]({urls[host]})" for host in BADGES]


def title(nb):
    first = nb.cells[0].source.splitlines()[0]
    return re.sub(r"^#\s*", "", first).strip()


def nav_block(name, prev, nxt, twin=None):
    """The stamped part of lesson ``name``'s first cell; prev/nxt: (file name, title) or None; twin: the
    link to the other edition, or None."""
    readme_text, readme = WORDS[edition(name)]["readme"]
    links = [f"← [{prev[1]}]({prev[0]})" if prev else f"← [{readme_text}]({readme})",
             f"[{nxt[1]}]({nxt[0]}) →" if nxt else f"[{readme_text}]({readme}) →"]
    if twin:
        links.append(f"[{WORDS[edition(name)]['twin']}]({twin})")
    return f"{NAV_START}\n{' '.join(badges(name))}\n\n{' · '.join(links)}\n{NAV_END}"


def stamp(path: Path, name, prev, nxt, twin=None, english_head=None) -> bool:
    """Stamp the lesson at ``path`` (``name`` relative to notebooks/). english_head: (before, after) of the
    English first cell, for a Chinese lesson whose English nav was stamped in this run."""
    nb = nbformat.read(path, as_version=4)
    head = nb.cells[0]
    block = nav_block(name, prev, nxt, twin)
    if NAV_START in head.source:
        new = re.sub(re.escape(NAV_START) + ".*?" + re.escape(NAV_END), lambda _: block, head.source, flags=re.S)
    else:
        first, _, rest = head.source.partition("\n")
        new = f"{first}\n\n{block}\n{rest}"
    changed = new != head.source
    head.source = new
    en_sha = head.metadata.get("zh", {}).get("en_sha")
    if english_head and en_sha == source_sha(english_head[0]) != source_sha(english_head[1]):
        head.metadata["zh"]["en_sha"] = source_sha(english_head[1])  # still in step: only the nav changed
        changed = True
    changed |= stamp_setup(nb, WORDS[edition(name)]["setup"], WORDS[edition(name)]["setup_prints"])
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    if nb.metadata.get("kernelspec") != kernelspec:
        nb.metadata["kernelspec"], changed = kernelspec, True
    if changed:
        nbformat.write(nb, path)
    return changed


def stamp_setup(nb, source, prints) -> bool:
    """Make the second cell the setup cell, with what it ``prints`` in the test configuration."""
    setup = nb.cells[1] if len(nb.cells) > 1 else None
    marks = (SETUP_MARK, SETUP_MARK_ZH, *EARLIER_MARKS)
    if setup is None or not (setup.cell_type == "code" and setup.source.startswith(marks)):
        setup = nbformat.v4.new_code_cell(source)
        nb.cells.insert(1, setup)
    elif setup.source == source:
        return False
    setup.source = source
    setup.outputs = [nbformat.v4.new_output("stream", name="stdout", text=prints)]
    return True


TABLE_ROW = re.compile(r"^\| (\d\d) \| \[([^\]]*)\]\(notebooks/(?:zh/)?(\d\d-[^)/]+\.ipynb)\) \|")
TABLE_HEAD_ZH = "| # | Notebook | 你会学到 | Colab | Kaggle | Binder | English |"


def stamp_readme(path: Path, chinese=(), titles=None) -> bool:
    """Rewrite each lesson row of a README's table: README.md's rows link the English lessons with their
    badges; README.zh.md's the Chinese twins in ``chinese`` (file names; the English where there is none),
    with their badges and a last column that links the English lesson. ``titles``: {"NN-name.ipynb" or
    "zh/NN-name.ipynb": the lesson's title}, the link text of the rows of the README's own edition."""
    zh_table = path.name.endswith(".zh.md")
    text = path.read_text(encoding="utf-8")
    lines = []
    for line in text.split("\n"):
        m = TABLE_ROW.match(line)
        if m:
            number, text_, file = m.groups()
            description = line.strip().strip("|").split(" | ")[2].strip()
            name = f"zh/{file}" if zh_table and file in chinese else file
            if zh_table == name.startswith("zh/"):  # a row of its own edition: the lesson's title
                text_ = (titles or {}).get(name, text_)
            cells = [number, f"[{text_}](notebooks/{name})", description, *badges(name)]
            if zh_table:
                cells.append(f"[English](notebooks/{file})")
                if len(lines) >= 2 and lines[-2].startswith("| # |") and lines[-1].startswith("|---"):
                    lines[-2:] = [TABLE_HEAD_ZH, "|" + "---|" * len(cells)]
            line = "| " + " | ".join(cells) + " |"
        lines.append(line)
    new = "\n".join(lines)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def neighbours(items, i):
    return (items[i - 1] if i > 0 else None), (items[i + 1] if i + 1 < len(items) else None)


def main(only):
    english = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    chinese = sorted((NOTEBOOKS / "zh").glob("[0-9][0-9]-*.ipynb"))
    wanted = {Path(p).resolve() for p in only}

    def todo(path):  # a Chinese twin is stamped with its English
        return not wanted or path.resolve() in wanted or (NOTEBOOKS / path.name).resolve() in wanted
    en_titles = [(p.name, title(nbformat.read(p, as_version=4))) for p in english]
    zh_titles = [(p.name, title(nbformat.read(p, as_version=4))) for p in chinese]
    zh_names = [p.name for p in chinese]
    heads = {}  # English first cells stamped in this run: {file name: (before, after)}
    for i, path in enumerate(english):
        twin = f"zh/{path.name}" if path.name in zh_names else None
        if not twin:
            print(f"no Chinese twin: notebooks/zh/{path.name} (skipped; create it with tools/translate.py)")
        if todo(path):
            before = nbformat.read(path, as_version=4).cells[0].source
            changed = stamp(path, path.name, *neighbours(en_titles, i), twin=twin)
            heads[path.name] = (before, nbformat.read(path, as_version=4).cells[0].source)
            print(f"{'stamped' if changed else 'unchanged'}: notebooks/{path.name}")
    for i, path in enumerate(chinese):
        if todo(path):
            twin = f"../{path.name}" if (NOTEBOOKS / path.name).exists() else None
            changed = stamp(path, f"zh/{path.name}", *neighbours(zh_titles, i), twin=twin,
                            english_head=heads.get(path.name))
            print(f"{'stamped' if changed else 'unchanged'}: notebooks/zh/{path.name}")
    titles = {name: re.sub(r"^\d\d · ", "", text) for name, text in en_titles}
    titles.update({f"zh/{name}": re.sub(r"^\d\d · ", "", text) for name, text in zh_titles})
    for readme in READMES:
        if readme.exists():
            print(f"{'stamped' if stamp_readme(readme, zh_names, titles) else 'unchanged'}: {readme.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
