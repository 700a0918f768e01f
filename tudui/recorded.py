"""What a GPU cell printed on a real GPU, shown (labelled as a recording) on a machine without one.

A notebook cell that needs a GPU ends in one call in its ``else:`` branch::

    if torch.cuda.is_available():
        ...                                          # the lesson's lines, run live
    else:
        tudui.show_recorded("03-to-device", "assignment", "'cpu' without the assignment, 'cuda:0' with it")

Recordings are made by running the notebooks on a GPU (``tools/gpu_check.sh``); they
live in ``notebooks/recorded/NN-name.json``, one entry per cell id::

    {cell_id: {"key": ..., "source_sha": ..., "outputs": [text, ...], "device": ..., "torch": ..., "date": ...}}
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

# show_recorded("03-to-device", "assignment", ...): the notebook and key a cell names
CALL = re.compile(r"""show_recorded\(\s*(['"])([^'"]+)\1\s*,\s*(['"])([^'"]+)\3""")


def source_sha(source: str) -> str:
    """The hash a recording keeps of its cell's source (stale when the source changes)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def calls_in(source: str) -> list:
    """The (notebook, key) pairs of the show_recorded calls in a cell's source."""
    return [(m.group(2), m.group(4)) for m in CALL.finditer(source)]


def _folders():
    """Where recordings are looked for: next to the running notebook, then in this repository's checkout."""
    here = Path.cwd()
    return [here / "recorded", here / "notebooks" / "recorded",
            Path(__file__).resolve().parent.parent / "notebooks" / "recorded"]


def find_recording(notebook: str, key: str):
    """The recorded entry of ``key`` in ``notebook`` (a dict), or None when there is none."""
    if Path(notebook).name != notebook or notebook.endswith(".ipynb"):
        raise ValueError(f"notebook must be a name such as '03-to-device', not {notebook!r}")
    for folder in _folders():
        path = folder / f"{notebook}.json"
        if path.is_file():
            entries = json.loads(path.read_text(encoding="utf-8")).values()
            return next((entry for entry in entries if entry.get("key") == key), None)
    return None


def show_recorded(notebook: str, key: str, on_gpu: str = "") -> None:
    """Print what this cell printed on a real GPU, labelled as recorded; without a recording,
    what a GPU would show (``on_gpu``). Never passes a recording off as live."""
    entry = find_recording(notebook, key)
    if entry is None:
        print(f"No GPU here. On a GPU this cell shows {on_gpu}" if on_gpu else "No GPU here.")
        return
    print(f"No GPU here. Recorded on {entry['device']}, torch {entry['torch']}, {entry['date']} (not a live run):")
    text = "".join(entry["outputs"])
    print("\n".join("    " + line for line in text.rstrip("\n").splitlines()))
