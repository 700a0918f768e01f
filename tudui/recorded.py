"""What a GPU cell printed on a real GPU, shown (labelled as a recording) on a machine without one: the cell's
``else:`` branch calls ``tudui.show_recorded("03-to-device", "assignment", "<what a GPU would show>")``.
Recordings are package data (tudui/recordings/NN-name.json, one entry per cell id; the README there says how
they are made); a lesson's Chinese edition has the same cell ids and passes ``lang="zh"``."""
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


LABELS = {  # what show_recorded prints around a recording, in the notebook's language
    "en": {"none": "No GPU here.", "placeholder": "No GPU here. On a GPU this cell shows {on_gpu}",
           "recorded": "No GPU here. Recorded on {device}, torch {torch}, {date}{settings} (not a live run):",
           "comma": ", "},
    "zh": {"none": "这里没有 GPU。", "placeholder": "这里没有 GPU。在 GPU 上，这个单元格会显示：{on_gpu}",
           "recorded": "这里没有 GPU。以下是在 {device}、torch {torch}、{date}{settings} 录制的输出（不是现场运行）：",
           "comma": "，"},
}


def show_recorded(notebook: str, key: str, on_gpu: str = "", lang: str = "en") -> None:
    """Print what this cell printed on a real GPU, labelled as recorded; without a recording,
    what a GPU would show (``on_gpu``). Never passes a recording off as live. ``lang`` is the
    notebook's language ("en" or "zh"): both editions of a lesson share its recordings."""
    if lang not in LABELS:
        raise ValueError(f"lang must be one of {sorted(LABELS)} (the notebook's language), not {lang!r}")
    labels = LABELS[lang]
    entry = find_recording(notebook, key)
    if entry is None:
        print(labels["placeholder"].format(on_gpu=on_gpu) if on_gpu else labels["none"])
        return
    settings = entry.get("settings")  # e.g. "quick sizes, synthetic data"
    print(labels["recorded"].format(**{**entry, "settings": f"{labels['comma']}{settings}" if settings else ""}))
    text = "".join(entry["outputs"])
    print("\n".join("    " + line for line in text.rstrip("\n").splitlines()))
