"""What a GPU cell printed on a real GPU, shown as a recording where there is none (the cell's ``else:`` branch calls
``tudui.show_recorded("03-to-device", "assignment", "<what a GPU would show>")``), from tudui/recordings/NN-name.json:
one entry per cell id, shared by both editions of a lesson (README.md there)."""
import json
from importlib import resources

from .text import say


def find_recording(notebook: str, key: str):
    """The recorded entry of ``key`` in ``notebook`` (a dict), or None when there is none."""
    if "/" in notebook or "\\" in notebook or notebook.endswith(".ipynb"):
        raise ValueError(say("recorded.bad_notebook", notebook=notebook))
    path = resources.files("tudui") / "recordings" / f"{notebook}.json"
    if not path.is_file():
        return None
    entries = json.loads(path.read_text(encoding="utf-8")).values()
    return next((entry for entry in entries if entry.get("key") == key), None)


def show_recorded(notebook: str, key: str, on_gpu: str = "", lang: str | None = None) -> None:
    """Print what this cell printed on a real GPU, labelled as recorded (never as live); without a recording, what a
    GPU would show (``on_gpu``). ``lang``: "en" or "zh", default the language in force."""
    entry = find_recording(notebook, key)
    if entry is None:
        print(say("recorded.placeholder", lang, on_gpu=on_gpu) if on_gpu else say("recorded.none", lang))
        return
    settings = say("recorded.comma", lang) + entry["settings"] if entry.get("settings") else ""  # e.g. "quick sizes"
    print(say("recorded.recorded", lang, device=entry["device"], torch=entry["torch"], date=entry["date"],
              settings=settings))
    text = "".join(entry["outputs"])
    print("\n".join("    " + line for line in text.rstrip("\n").splitlines()))
