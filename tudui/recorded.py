"""What a GPU cell printed on a real GPU, shown (labelled as a recording) on a machine without one.

A notebook cell that needs a GPU ends in one call in its ``else:`` branch::

    if torch.cuda.is_available():
        ...                                          # the lesson's lines, run live
    else:
        tudui.show_recorded("03-to-device", "assignment", "'cpu' without the assignment, 'cuda:0' with it")

The recordings ship inside the package (``tudui/recordings/NN-name.json``, one entry per cell id),
so a ``pip install`` of tudui shows them too; see the README in that folder for how they are made.
"""
from __future__ import annotations

import json
from importlib import resources


def find_recording(notebook: str, key: str):
    """The recorded entry of ``key`` in ``notebook`` (a dict), or None when there is none."""
    if "/" in notebook or "\\" in notebook or notebook.endswith(".ipynb"):
        raise ValueError(f"notebook must be a name such as '03-to-device', not {notebook!r}")
    path = resources.files("tudui") / "recordings" / f"{notebook}.json"
    if not path.is_file():
        return None
    entries = json.loads(path.read_text(encoding="utf-8")).values()
    return next((entry for entry in entries if entry.get("key") == key), None)


def show_recorded(notebook: str, key: str, on_gpu: str = "") -> None:
    """Print what this cell printed on a real GPU, labelled as recorded; without a recording,
    what a GPU would show (``on_gpu``). Never passes a recording off as live."""
    entry = find_recording(notebook, key)
    if entry is None:
        print(f"No GPU here. On a GPU this cell shows {on_gpu}" if on_gpu else "No GPU here.")
        return
    settings = f", {entry['settings']}" if entry.get("settings") else ""  # e.g. "quick sizes, synthetic data"
    print(f"No GPU here. Recorded on {entry['device']}, torch {entry['torch']}, {entry['date']}{settings} "
          "(not a live run):")
    text = "".join(entry["outputs"])
    print("\n".join("    " + line for line in text.rstrip("\n").splitlines()))
