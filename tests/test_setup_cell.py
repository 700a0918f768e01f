"""The setup cell that opens every lesson, run for real in fresh virtual environments.

Each environment sees this one's torch and other packages, but not tudui: like Colab, Kaggle
or ModelScope before the cell runs. TUDUI_SOURCE, the learner's way to avoid GitHub, points the
cell at a copy of this repository (a folder or a GitHub-style ZIP), and pip may not use an index:
whatever it installs must come from that source, and torch must stay where it was.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stamp_notebooks import SETUP, SETUP_ZH

ROOT = Path(__file__).resolve().parent.parent
SITE_PACKAGES = Path(torch.__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name == "nt", reason="builds its environments with symlinks")


@pytest.fixture(scope="module")
def shared_packages(tmp_path_factory):
    """This environment's packages, tudui left out (its editable install too)."""
    shared = tmp_path_factory.mktemp("shared")
    for entry in SITE_PACKAGES.iterdir():
        if not entry.name.startswith(("tudui", "__editable__")):
            (shared / entry.name).symlink_to(entry)
    return shared


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of the repository's package, with a recording, as a folder and as GitHub's ZIP download of it."""
    parent = tmp_path_factory.mktemp("source")
    folder = parent / "pytorch-cpu-gpu-main"
    folder.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, folder / name)
    shutil.copytree(ROOT / "tudui", folder / "tudui", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "tudui" / "recordings" / "99-fixture.json").write_text("{}")  # the repository may have none yet
    archive = shutil.make_archive(str(parent / "download"), "zip", root_dir=parent, base_dir=folder.name)
    return {"folder": folder, "zip": Path(archive)}


@pytest.fixture
def fresh_venv(tmp_path, shared_packages):
    """``fresh_venv(torch=True)``: a new virtual environment without tudui; returns (python, site-packages)."""
    def make(torch=True):
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        if torch:
            (site / "shared.pth").write_text(f"{shared_packages}\n")  # pip and torch come from here
        return python, site
    return make


def run_cell(python, cwd, tudui_source, setup=SETUP, then=""):
    """Run the setup cell (``setup``: an edition's), and the code ``then`` after it, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TUDUI_LANG")}  # the test run's
    # PIP_NO_BUILD_ISOLATION=0 turns build isolation *off* (pip reads the variable inverted).
    env.update(TUDUI_SOURCE=str(tudui_source), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")
    cell = cwd / "setup_cell.py"
    cell.write_text(setup + then, encoding="utf-8")
    run = subprocess.run([str(python), str(cell)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                         encoding="utf-8")
    assert run.returncode == 0, f"the setup cell raised:\n{run.stderr}"
    assert run.stderr == "", f"the setup cell wrote to stderr:\n{run.stderr}"
    return run.stdout


def found_at(python, cwd, module, really_import=False):
    """Where ``python`` finds ``module`` (None: nowhere); with really_import, where the import loads it from."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (f"import {module}; print({module}.__file__)" if really_import else
            f"import importlib.util as u; s = u.find_spec({module!r}); print(s.origin if s else '')")
    run = subprocess.run([str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return Path(run.stdout.strip()) if run.stdout.strip() else None


INSTALLED = {"en": ("installed tudui from {}; torch {} kept", "tudui is installed"),
             "zh": ("已从 {} 安装 tudui；torch {} 保持不变", "tudui 已经装好了")}


@pytest.mark.parametrize("kind, lang", [("folder", "en"), pytest.param("zip", "en", marks=pytest.mark.slow),
                                        ("folder", "zh")])
def test_installs_tudui_where_it_is_missing_and_a_second_run_does_nothing(kind, lang, fresh_venv, source, tmp_path):
    python, site = fresh_venv()
    assert found_at(python, tmp_path, "tudui") is None, "the fresh environment already has tudui"
    torch_before = found_at(python, tmp_path, "torch")
    setup, (installed_from, is_installed) = SETUP_ZH if lang == "zh" else SETUP, INSTALLED[lang]

    first = run_cell(python, tmp_path, source[kind], setup)
    torch_version = importlib.metadata.version("torch")
    assert first == installed_from.format(source[kind], torch_version) + "\n"

    tudui_file = found_at(python, tmp_path, "tudui", really_import=True)
    assert tudui_file is not None and tudui_file.is_relative_to(site), f"tudui imports from {tudui_file}"
    assert found_at(python, tmp_path, "torch") == torch_before
    installed = {p.name for p in site.iterdir()}
    assert installed == {"shared.pth", "tudui", "tudui-0.1.0.dist-info"}, f"pip also installed {installed}"
    for data in ("recordings/99-fixture.json", "cli/commands.json", "text/lessons.json"):  # read from the install
        assert (site / "tudui" / data).is_file(), f"the install has no tudui/{data}"

    assert run_cell(python, tmp_path, source[kind], setup) == is_installed + "\n"
    assert {p.name for p in site.iterdir()} == installed


@pytest.mark.parametrize("setup, failed, what_works", [
    (SETUP, "could not install tudui from {}: ERROR",
     "No GitHub here? Get the repository's ZIP from anyone who has it, unpack it, put "
     "%env TUDUI_SOURCE=<the unpacked folder> in a cell above this one and run both (notebook 05)"),
    (SETUP_ZH, "没能从 {} 安装 tudui：ERROR",
     "连不上 GitHub？找有这个仓库 ZIP 的人要一份，解压，在这个单元格上面加一个单元格写上 "
     "%env TUDUI_SOURCE=<解压出来的文件夹>，再依次运行这两个单元格（第 05 课）"),
], ids=["en", "zh"])
def test_a_source_that_cannot_be_installed_says_what_works_and_raises_nothing(fresh_venv, tmp_path, setup, failed,
                                                                              what_works):
    """GitHub out of reach is the common case in mainland China: the second line says what works instead."""
    python, site = fresh_venv()
    missing = tmp_path / "no-such-download.zip"
    printed = run_cell(python, tmp_path, missing, setup)
    first, second = printed.splitlines()
    assert first.startswith(failed.format(missing)), printed
    assert second == what_works
    assert {p.name for p in site.iterdir()} == {"shared.pth"}


@pytest.mark.parametrize("setup, said", [
    (SETUP, "torch is missing: install it first (notebook 00), then run this cell again"),
    (SETUP_ZH, "还没有安装 torch：请先安装它（第 00 课），再运行这个单元格"),
], ids=["en", "zh"])
def test_without_torch_it_installs_nothing_and_says_so(fresh_venv, source, tmp_path, setup, said):
    python, site = fresh_venv(torch=False)
    printed = run_cell(python, tmp_path, source["folder"], setup)
    assert printed == said + "\n"
    assert list(site.iterdir()) == []


@pytest.mark.parametrize("setup, lang", [(SETUP, "en"), (SETUP_ZH, "zh")], ids=["en", "zh"])
def test_the_cell_sets_its_lessons_language_for_tudui_and_what_it_starts(fresh_venv, tmp_path, setup, lang):
    """$TUDUI_LANG, so that `!python -m tudui ...` and torchrun's processes speak the lesson's language too."""
    python, _ = fresh_venv(torch=False)
    printed = run_cell(python, tmp_path, tmp_path / "none", setup, then='\nprint(os.environ["TUDUI_LANG"])')
    assert printed.splitlines()[-1] == lang
