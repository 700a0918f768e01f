"""What the recording tools and tests need to know about recordings: the hash of a cell, the calls in it.

A recording (tudui/recordings/NN-name.json) is tied to its cell's source by this hash, and to the
cell's ``show_recorded("NN-name", "key", ...)`` call by its notebook and key.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "tudui" / "recordings"
# show_recorded("03-to-device", "assignment", ...): the notebook and key a cell names
CALL = re.compile(r"""show_recorded\(\s*(['"])([^'"]+)\1\s*,\s*(['"])([^'"]+)\3""")


def source_sha(source: str) -> str:
    """The hash a recording keeps of its cell's source (stale when the source changes)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def calls_in(source: str) -> list:
    """The (notebook, key) pairs of the show_recorded calls in a cell's source."""
    return [(m.group(2), m.group(4)) for m in CALL.finditer(source)]


# A recorded cell that shows a time, a speed or memory use must run alone on the GPU: jobs beside it would
# slow it down or show up in nvidia-smi.
MEASURES = re.compile(r"nvidia-smi|Stopwatch|measure\(|interleaved\(|perf_counter|images_per_s|memory_")


def runs_alone(notebook: Path) -> bool:
    """True when a cell of ``notebook`` that calls show_recorded measures time, speed or memory."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return any(calls_in(s) and MEASURES.search(s) for s in sources)


if __name__ == "__main__":  # python tools/recordings.py FOLDER: "alone NAME" or "side NAME", one line each
    for path in sorted(Path(sys.argv[1]).glob("[0-9][0-9]-*.ipynb")):
        print("alone" if runs_alone(path) else "side", path.stem)
