"""Stamp badges, previous/next links and the Colab setup cell into every notebook.

Idempotent: the stamped parts sit between markers and are rewritten in place,
so running it twice changes nothing. Only the first (markdown) cell and the
setup cell are touched. Usage: python tools/stamp_notebooks.py [NOTEBOOK ...]
(default: all; links always come from the full list).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).parent))
from notebook_settings import BRANCH, REPO  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAV_START, NAV_END = "<!-- nav -->", "<!-- /nav -->"
SETUP_MARK = "# Colab setup"

SETUP = f'''{SETUP_MARK}: installs the lesson package; Colab's own torch stays as it is. Does nothing elsewhere.
import sys
if "google.colab" in sys.modules:
    %pip install -q "tudui @ git+https://github.com/{REPO}@{BRANCH}"'''


def colab_url(name):
    return f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/notebooks/{name}"


def binder_url(name):
    return f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?urlpath=lab/tree/notebooks/{name}"


def title(nb):
    first = nb.cells[0].source.splitlines()[0]
    return re.sub(r"^#\s*", "", first).strip()


def nav_block(name, prev, nxt):
    badges = (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(name)}) "
              f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(name)})")
    links = [f"← [{prev[1]}]({prev[0]})" if prev else "← [README](../README.md)",
             f"[{nxt[1]}]({nxt[0]}) →" if nxt else "[README](../README.md) →"]
    return f"{NAV_START}\n{badges}\n\n{' · '.join(links)}\n{NAV_END}"


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
    if setup is None or not (setup.cell_type == "code" and setup.source.startswith(SETUP_MARK)):
        nb.cells.insert(1, nbformat.v4.new_code_cell(SETUP))
        changed = True
    elif setup.source != SETUP:
        setup.source, changed = SETUP, True
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    if changed:
        nbformat.write(nb, path)
    return changed


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


if __name__ == "__main__":
    main(sys.argv[1:])
