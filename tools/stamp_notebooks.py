"""Stamp badges, previous/next links and the setup cell into every notebook, and the badges into the READMEs.

Idempotent: the stamped parts sit between markers (or in the READMEs' lesson tables) and are
rewritten in place, so running it twice changes nothing. Only the first (markdown) cell and the
setup cell of a notebook are touched. Usage: python tools/stamp_notebooks.py [NOTEBOOK ...]
(default: all; links always come from the full list; the READMEs are stamped on every run).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).parent))
from notebook_settings import BRANCH, REPO  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
READMES = [ROOT / "README.md", ROOT / "README.zh.md"]
NAV_START, NAV_END = "<!-- nav -->", "<!-- /nav -->"
SETUP_MARK = "# Setup:"
EARLIER_MARKS = ("# Colab setup",)  # setup cells stamped before, replaced in place
DEFAULT_SOURCE = f"git+https://github.com/{REPO}@{BRANCH}"

SETUP = f'''{SETUP_MARK} installs the lessons' package `tudui` where it is missing (Colab, Kaggle, ...); never torch.
# GitHub slow or blocked? Set TUDUI_SOURCE to another git URL, a folder or a downloaded ZIP (notebook 05).
import importlib.metadata, importlib.util, os, subprocess, sys, tempfile
SOURCE = os.environ.get("TUDUI_SOURCE") or "{DEFAULT_SOURCE}"

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
        return f"could not install tudui from {{source}}: {{why}}. Check the internet or TUDUI_SOURCE (notebook 05)"
    importlib.invalidate_caches()           # so that `import tudui` finds it in this kernel
    return f"installed tudui from {{source}}; torch {{torch_version}} kept"

print(install_tudui(SOURCE))'''

BADGES = {
    "Colab": "https://colab.research.google.com/assets/colab-badge.svg",
    "Kaggle": "https://kaggle.com/static/images/open-in-kaggle.svg",
    "Binder": "https://mybinder.org/badge_logo.svg",
}


def colab_url(name):
    return f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/notebooks/{name}"


def kaggle_url(name):
    return f"https://kaggle.com/kernels/welcome?src=https://github.com/{REPO}/blob/{BRANCH}/notebooks/{name}"


def binder_url(name):
    return f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?urlpath=lab/tree/notebooks/{name}"


def badges(name):
    """Markdown badges that open notebook ``name`` on Colab, Kaggle and Binder, in that order."""
    urls = {"Colab": colab_url(name), "Kaggle": kaggle_url(name), "Binder": binder_url(name)}
    return [f"[![Open in {host}]({BADGES[host]})]({urls[host]})" for host in BADGES]


def title(nb):
    first = nb.cells[0].source.splitlines()[0]
    return re.sub(r"^#\s*", "", first).strip()


def nav_block(name, prev, nxt):
    links = [f"← [{prev[1]}]({prev[0]})" if prev else "← [README](../README.md)",
             f"[{nxt[1]}]({nxt[0]}) →" if nxt else "[README](../README.md) →"]
    return f"{NAV_START}\n{' '.join(badges(name))}\n\n{' · '.join(links)}\n{NAV_END}"


def stamp(path: Path, prev, nxt) -> bool:
    nb = nbformat.read(path, as_version=4)
    head = nb.cells[0]
    block = nav_block(path.name, prev, nxt)
    if NAV_START in head.source:
        new = re.sub(re.escape(NAV_START) + ".*?" + re.escape(NAV_END), lambda _: block, head.source, flags=re.S)
    else:
        first, _, rest = head.source.partition("\n")
        new = f"{first}\n\n{block}\n{rest}"
    changed = new != head.source
    head.source = new
    setup = nb.cells[1] if len(nb.cells) > 1 else None
    if setup is None or not (setup.cell_type == "code" and setup.source.startswith((SETUP_MARK, *EARLIER_MARKS))):
        nb.cells.insert(1, nbformat.v4.new_code_cell(SETUP))
        changed = True
    elif setup.source != SETUP:
        setup.source, changed = SETUP, True
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    if changed:
        nbformat.write(nb, path)
    return changed


TABLE_ROW = re.compile(r"^\| \d\d \| \[[^\]]*\]\(notebooks/(\d\d-[^)]+\.ipynb)\) \|")


def stamp_readme(path: Path) -> bool:
    """Rewrite the badge cells (Colab | Kaggle | Binder) of each lesson row in a README's table."""
    text = path.read_text(encoding="utf-8")
    lines = []
    for line in text.split("\n"):
        m = TABLE_ROW.match(line)
        if m:
            cells = line.strip().strip("|").split(" | ")
            line = "| " + " | ".join([c.strip() for c in cells[:3]] + badges(m.group(1))) + " |"
        lines.append(line)
    new = "\n".join(lines)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(only):
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    wanted = {Path(p).resolve() for p in only}
    titles = [(p.name, title(nbformat.read(p, as_version=4))) for p in paths]
    for i, path in enumerate(paths):
        if wanted and path.resolve() not in wanted:
            continue
        prev = titles[i - 1] if i > 0 else None
        nxt = titles[i + 1] if i + 1 < len(paths) else None
        print(f"{'stamped' if stamp(path, prev, nxt) else 'unchanged'}: {path.name}")
    for readme in READMES:
        if readme.exists():
            print(f"{'stamped' if stamp_readme(readme) else 'unchanged'}: {readme.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
