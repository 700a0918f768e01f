"""Recorded GPU outputs: no stale recording, and the whole path (run, record, show) works end to end."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tudui.recorded
from record_outputs import RecordError, record
from record_outputs import main as record_main
from recordings import calls_in, source_sha
from tudui.recorded import find_recording, show_recorded

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
RECORDED = ROOT / "tudui" / "recordings"
TOOLS = ROOT / "tools"


def code_cells(path):
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def stale(notebook: Path, recording: Path) -> list:
    """What is wrong with ``recording`` for ``notebook``, one line per cell (empty: up to date)."""
    if not notebook.is_file():
        return [f"{recording.name}: records {notebook.name}, which does not exist"]
    cells = {c.get("id"): "".join(c["source"]) for c in code_cells(notebook)}
    problems = []
    for cell_id, entry in json.loads(recording.read_text(encoding="utf-8")).items():
        where = f"{notebook.name} cell id {cell_id} (key {entry.get('key')!r})"
        if cell_id not in cells:
            problems.append(f"{where}: no such cell any more")
        elif source_sha(cells[cell_id]) != entry["source_sha"]:
            problems.append(f"{where}: the cell changed since it was recorded; record it again on a GPU "
                            "(tools/gpu_check.sh) or undo the change")
        elif (notebook.stem, entry["key"]) not in calls_in(cells[cell_id]):
            problems.append(f"{where}: the cell does not call show_recorded({notebook.stem!r}, {entry['key']!r})")
    return problems


@pytest.mark.parametrize("recording", sorted(RECORDED.glob("*.json")), ids=lambda p: p.name)
def test_recordings_match_their_cells(recording):
    problems = stale(NOTEBOOKS / f"{recording.stem}.ipynb", recording)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")), ids=lambda p: p.name)
def test_show_recorded_calls_name_their_own_notebook_once(notebook):
    keys = []
    for cell in code_cells(notebook):
        calls = calls_in("".join(cell["source"]))
        assert all(name == notebook.stem for name, _ in calls), \
            f"{notebook.name} cell id {cell.get('id')}: show_recorded names {calls}, not {notebook.stem!r}"
        assert len(calls) <= 1, f"{notebook.name} cell id {cell.get('id')}: more than one show_recorded call"
        assert not calls or cell.get("id"), f"{notebook.name}: cells have no ids (nbformat 4.5 gives them)"
        keys += [key for _, key in calls]
    assert len(keys) == len(set(keys)), f"{notebook.name}: a show_recorded key is used twice: {sorted(keys)}"


def cell(source, cell_id, tags=()):
    return {"cell_type": "code", "id": cell_id, "metadata": {"tags": list(tags)}, "source": source,
            "outputs": [], "execution_count": None}


GUARDED = ('import os\nfrom tudui.recorded import show_recorded\n'
           'if os.environ.get("FIXTURE_LIVE"):\n'
           '    print("live: 42 images/s")\n'
           'else:\n'
           '    show_recorded("99-fixture", "speed", "a speed in images/s")')


@pytest.fixture
def fixture_notebook(tmp_path):
    cells = [cell("%pip install nothing\nx = 6 * 7\nx", "a1"), cell("!echo from a shell", "a2"),
             cell("%%writefile made.txt\nhello", "a3"), cell("raise ValueError('on purpose')", "a4",
                                                              ["raises-exception"]),
             cell(GUARDED, "a5")]
    path = tmp_path / "99-fixture.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def run_runner(notebook, out, live=True, package=ROOT):
    """tools/run_notebook_cells.py on ``notebook``, importing tudui from the folder ``package``."""
    path = os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "FIXTURE_LIVE": "1" if live else "", "PYTHONPATH": path}
    return subprocess.run([sys.executable, str(TOOLS / "run_notebook_cells.py"), str(notebook), str(out)],
                          env=env, capture_output=True, text=True, timeout=120)


def run_cells(notebook, out, live, package=ROOT):
    done = run_runner(notebook, out, live, package)
    assert done.returncode == 0, done.stdout + done.stderr
    return {c["id"]: c for c in json.loads(out.read_text())["cells"]}


@pytest.mark.slow
def test_run_record_and_show_end_to_end(fixture_notebook, tmp_path):
    live = run_cells(fixture_notebook, tmp_path / "live.json", live=True)
    assert live["a1"]["outputs"] == ["42\n"]
    assert live["a2"]["outputs"] == ["from a shell\n"]
    assert (tmp_path / "made.txt").read_text() == "hello" and live["a3"]["outputs"] == ["Writing made.txt\n"]
    assert live["a4"]["error"] is None and "on purpose" in live["a4"]["stderr"]
    assert live["a5"]["outputs"] == ["live: 42 images/s\n"]

    with pytest.raises(RecordError, match="must come from a GPU run"):
        record(tmp_path / "live.json", tmp_path / "recorded")
    saved = json.loads(record(tmp_path / "live.json", tmp_path / "recorded", allow_cpu=True).read_text())
    assert list(saved) == ["a5"] and saved["a5"]["key"] == "speed"
    assert not stale(fixture_notebook, tmp_path / "recorded" / "99-fixture.json")

    package = tmp_path / "pkg"  # a copy of the package with the recording installed, never the repository's
    shutil.copytree(ROOT / "tudui", package / "tudui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(tmp_path / "recorded" / "99-fixture.json", package / "tudui" / "recordings")
    shown = run_cells(fixture_notebook, tmp_path / "shown.json", live=False, package=package)["a5"]["outputs"][0]
    label, body = shown.splitlines()
    assert label.startswith(f"No GPU here. Recorded on {saved['a5']['device']}, torch ") and "not a live run" in label
    assert body == "    live: 42 images/s"


def test_a_changed_cell_makes_its_recording_stale(fixture_notebook, tmp_path):
    recording = tmp_path / "99-fixture.json"
    entry = {"key": "speed", "source_sha": source_sha(GUARDED), "outputs": ["x\n"], "device": "GPU", "torch": "2",
             "date": "2026-01-01"}
    recording.write_text(json.dumps({"a5": entry}))
    assert stale(fixture_notebook, recording) == []
    nb = json.loads(fixture_notebook.read_text())
    nb["cells"][-1]["source"] = GUARDED.replace("42", "43")
    fixture_notebook.write_text(json.dumps(nb))
    assert stale(fixture_notebook, recording) == [
        "99-fixture.ipynb cell id a5 (key 'speed'): the cell changed since it was recorded; "
        "record it again on a GPU (tools/gpu_check.sh) or undo the change"]


def test_record_refuses_a_call_naming_another_notebook(tmp_path):
    run = {"notebook": "99-fixture", "device": "NVIDIA X", "torch": "2", "date": "d",
           "cells": [{"index": 0, "id": "b1", "source": 'tudui.show_recorded("03-to-device", "k")',
                      "source_sha": "0", "outputs": [], "error": None}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    with pytest.raises(RecordError, match="99-fixture cell 0 .id b1.: needs exactly one show_recorded"):
        record(tmp_path / "run.json", tmp_path)


def test_without_a_recording_a_placeholder_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    show_recorded("99-fixture", "speed", "a speed in images/s.")
    assert capsys.readouterr().out == "No GPU here. On a GPU this cell shows a speed in images/s.\n"


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """``recorded(outputs, **fields)``: tmp_path as the package, with one recording of 99-fixture's key "k"."""
    def install(outputs, **fields):
        entry = {"key": "k", "source_sha": "0", "outputs": outputs, "device": "NVIDIA H200",
                 "torch": "2.11.0+cu130", "date": "2026-05-01", **fields}
        (tmp_path / "recordings").mkdir()
        (tmp_path / "recordings" / "99-fixture.json").write_text(json.dumps({"c1": entry}))
        monkeypatch.setattr(tudui.recorded.resources, "files", lambda package: tmp_path)
    return install


def test_a_recording_is_read_from_the_package(recorded, capsys):
    recorded(["line 1\n", "line 2\n"])
    show_recorded("99-fixture", "k")
    assert capsys.readouterr().out == ("No GPU here. Recorded on NVIDIA H200, torch 2.11.0+cu130, 2026-05-01 "
                                       "(not a live run):\n    line 1\n    line 2\n")
    assert find_recording("99-fixture", "other") is None


def test_a_notebook_is_named_without_folder_or_suffix():
    with pytest.raises(ValueError, match="'03-to-device'"):
        find_recording("../03-to-device.ipynb", "k")


@pytest.mark.slow
def test_runner_names_failed_cells_and_runs_on(tmp_path):
    cells = [cell("print('before')", "c1"), cell("raise ValueError('boom')", "c2"),
             cell("import sys\nsys.exit(3)", "c3"), cell("print('after')", "c4")]
    notebook = tmp_path / "99-failing.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    done = run_runner(notebook, tmp_path / "run.json")
    assert done.returncode == 1
    assert "99-failing.ipynb cell 1 (id c2): ValueError: boom" in done.stdout
    assert "99-failing.ipynb cell 2 (id c3): SystemExit: 3" in done.stdout
    assert "4 code cells on CPU (no GPU)" in done.stdout and "2 failed" in done.stdout
    run = json.loads((tmp_path / "run.json").read_text())
    assert [c["outputs"] for c in run["cells"]] == [["before\n"], [], [], ["after\n"]]
    assert all(c["seconds"] >= 0 for c in run["cells"]) and run["device"] == "CPU (no GPU)"


def gpu_run(path, outputs, device="NVIDIA H200"):
    """A run file as the runner writes it, of one cell that calls show_recorded."""
    source = 'tudui.show_recorded("99-fixture", "k")'
    run = {"notebook": "99-fixture", "device": device, "torch": "2.11.0", "date": "2026-05-01",
           "cells": [{"index": 0, "id": "d1", "source": source, "source_sha": source_sha(source),
                      "outputs": outputs, "error": None}]}
    path.write_text(json.dumps(run))
    return path


def test_a_run_that_stopped_or_showed_no_live_output_is_not_recorded(tmp_path):
    with pytest.raises(RecordError, match="stopped after 1 code cells"):
        record(gpu_run(tmp_path / "stopped.json", ["x\n"], device=None), tmp_path)
    placeholder = gpu_run(tmp_path / "placeholder.json", ["No GPU here. On a GPU this cell shows x\n"])
    with pytest.raises(RecordError, match="cell 0 .id d1.: showed a recording or placeholder"):
        record(placeholder, tmp_path)


def test_one_run_that_cannot_be_recorded_does_not_stop_the_others(tmp_path, capsys):
    bad, good = gpu_run(tmp_path / "a.json", ["x\n"], device=None), gpu_run(tmp_path / "b.json", ["live\n"])
    assert record_main([str(bad), str(good), "--out", str(tmp_path / "recorded")]) == 2
    assert json.loads((tmp_path / "recorded" / "99-fixture.json").read_text())["d1"]["outputs"] == ["live\n"]
    out, err = capsys.readouterr()
    assert err.startswith("record_outputs: error: ") and err.count("\n") == 1 and "b.json: recorded in" in out


@pytest.fixture
def one_recording(recorded):
    recorded(["line 1\n"])


@pytest.mark.parametrize("lang, label", [
    ("en", "No GPU here. Recorded on NVIDIA H200, torch 2.11.0+cu130, 2026-05-01 (not a live run):"),
    ("zh", "这里没有 GPU。以下是在 NVIDIA H200、torch 2.11.0+cu130、2026-05-01 录制的输出（不是现场运行）："),
])
def test_a_recording_is_labelled_in_the_notebooks_language(one_recording, capsys, lang, label):
    show_recorded("99-fixture", "k", "ignored: there is a recording", lang=lang)
    assert capsys.readouterr().out == f"{label}\n    line 1\n"


@pytest.mark.parametrize("lang, on_gpu, shown", [
    ("en", "a speed in images/s.", "No GPU here. On a GPU this cell shows a speed in images/s."),
    ("zh", "以 images/s 计的速度。", "这里没有 GPU。在 GPU 上，这个单元格会显示：以 images/s 计的速度。"),
    ("en", "", "No GPU here."),
    ("zh", "", "这里没有 GPU。"),
])
def test_a_placeholder_is_in_the_notebooks_language(one_recording, capsys, lang, on_gpu, shown):
    show_recorded("99-fixture", "no such key", on_gpu, lang=lang)
    assert capsys.readouterr().out == shown + "\n"


def test_an_unknown_language_is_one_clear_error(one_recording, capsys):
    with pytest.raises(ValueError) as error:
        show_recorded("99-fixture", "k", lang="cn")
    assert str(error.value) == "language must be one of en, zh, not 'cn'"
    assert capsys.readouterr().out == ""


def test_without_lang_the_label_follows_the_language_in_force(one_recording, capsys, monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    show_recorded("99-fixture", "no such key", "GPU 的那一行。")
    show_recorded("99-fixture", "no such key", "the GPU line.", lang="en")  # a lang given still wins
    assert capsys.readouterr().out == "这里没有 GPU。在 GPU 上，这个单元格会显示：GPU 的那一行。\n" \
                                      "No GPU here. On a GPU this cell shows the GPU line.\n"


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")), ids=lambda p: p.name)
def test_every_show_recorded_cell_ignores_its_output_in_nbval(notebook):
    """Once its recording is installed, such a cell prints the recording, not what the notebook stored."""
    untagged = [c.get("id") for c in code_cells(notebook) if calls_in("".join(c["source"]))
                and "nbval-ignore-output" not in c.get("metadata", {}).get("tags", [])]
    assert not untagged, f"{notebook.name}: tag these show_recorded cells nbval-ignore-output: {untagged}"


@pytest.mark.parametrize("recording", sorted(RECORDED.glob("*.json")), ids=lambda p: p.name)
def test_installed_recordings_come_from_a_gpu_and_the_notebook_shows_them(recording):
    """A dry run's recording (made on the CPU) is never installed; the notebook is re-executed after one is."""
    cells = {c.get("id"): c for c in code_cells(NOTEBOOKS / f"{recording.stem}.ipynb")}
    for cell_id, entry in json.loads(recording.read_text(encoding="utf-8")).items():
        assert not entry["device"].startswith("CPU"), f"{recording.name} cell id {cell_id}: recorded without a GPU"
        shown = "".join("".join(o.get("text", "")) for o in cells.get(cell_id, {}).get("outputs", []))
        assert shown.startswith(f"No GPU here. Recorded on {entry['device']}"), \
            f"{recording.name} cell id {cell_id}: re-execute the notebook (tools/execute_notebooks.py) and commit it"


def test_the_label_names_the_settings_of_the_run(recorded, capsys):
    recorded(["x\n"], torch="2.11.0", settings="quick sizes, synthetic data")
    show_recorded("99-fixture", "k")
    assert capsys.readouterr().out.splitlines()[0] == (
        "No GPU here. Recorded on NVIDIA H200, torch 2.11.0, 2026-05-01, quick sizes, synthetic data (not a live run):")

