"""Checks on the stored lesson notebooks, without running a kernel (nbval does that).

Every ``notebooks/NN-name.ipynb`` and its Chinese twin ``notebooks/zh/NN-name.ipynb`` are
found when the tests run, so lessons added later are checked too; a notebook is named by its
path relative to notebooks/ (``zh/01-cpu-baseline.ipynb``). Failure messages name the notebook and the cell; cells
are counted from 0, as nbval counts them.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from recordings import source_sha
from stamp_notebooks import NAV_END, SETUP, SETUP_ZH, WORDS, badges, binder_url, colab_url, edition, kaggle_url

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
TOOLS = ROOT / "tools"
ENGLISH = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]
CHINESE = [f"zh/{p.name}" for p in sorted((NOTEBOOKS / "zh").glob("[0-9][0-9]-*.ipynb"))]
NAMES = ENGLISH + CHINESE

READMES = ["README.md", "README.zh.md"]
IGNORE_MARKERS = {"NBVAL_IGNORE_OUTPUT", "PYTEST_VALIDATE_IGNORE_OUTPUT", "NBVAL_SKIP"}
IGNORE_TAGS = {"nbval-ignore-output", "pytest-validate-ignore-output", "nbval-skip"}
# Places on a developer's machine that must not show up in stored outputs.
LOCAL_PATH = re.compile(r"/home/|/Users/|/root\b|/work/|/tmp/|/var/folders/|/private/var/|\b[A-Z]:\\")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def check(condition, message):
    """Fail with just ``message`` (no introspection dump of whole cells)."""
    if not condition:
        pytest.fail(message, pytrace=False)


def read(name):
    """The notebook ``name`` (relative to notebooks/; an absolute path is read as it is)."""
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def where(name, index, cell):
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else "(empty)"
    return f"{name} cell {index} ({cell.cell_type}: {first[:60]!r})"


def code_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def tags(cell):
    return set(cell.metadata.get("tags", []))


def is_compared(cell):
    """Would nbval compare this cell's outputs? (Same markers and tags as nbval.)"""
    markers = {line.strip().lstrip("#").strip() for line in cell.source.splitlines()
               if line.strip().startswith("#")}
    return not (markers & IGNORE_MARKERS or tags(cell) & IGNORE_TAGS)


def title(name):
    first = read(name).cells[0].source.splitlines()[0]
    return re.sub(r"^#\s*", "", first).strip()


def same_edition(name):
    return CHINESE if edition(name) == "zh" else ENGLISH


def twin_link(name):
    """The first cell's link to the other edition: zh/NN-name.ipynb from the English, ../NN-name.ipynb
    from the Chinese; None for an English lesson without a Chinese twin."""
    if edition(name) == "zh":
        return f"../{name[3:]}"
    return f"zh/{name}" if f"zh/{name}" in CHINESE else None


def output_texts(output):
    """The text a reader sees in one output (images left out)."""
    if output.output_type == "stream":
        yield output.text
    elif output.output_type == "error":
        yield output.ename
        yield output.evalue
        yield from (ANSI.sub("", line) for line in output.traceback)
    else:
        for mime, value in output.get("data", {}).items():
            if mime.startswith("text/") or mime.endswith("json"):
                yield value if isinstance(value, str) else str(value)


notebooks = pytest.mark.parametrize("name", NAMES)
STAMP = "run tools/stamp_notebooks.py"


def test_notebooks_are_found():
    check(NAMES, f"no notebooks/NN-name.ipynb in {NOTEBOOKS}")


@notebooks
def test_first_cell_title_badges_and_links(name):
    head = read(name).cells[0]
    at = where(name, 0, head)
    check(head.cell_type == "markdown", f"{at}: the first cell must be markdown (title, badges, links)")
    first = head.source.splitlines()[0] if head.source else ""
    number = name.split("/")[-1][:2]
    check(re.match(rf"# {number} · \S", first), f"{at}: must start with '# {number} · Title', not {first!r}")
    check(f"({colab_url(name)})" in head.source, f"{at}: no Colab badge linking to {colab_url(name)}; {STAMP}")
    check(f"({kaggle_url(name)})" in head.source, f"{at}: no Kaggle badge linking to {kaggle_url(name)}; {STAMP}")
    check(f"({binder_url(name)})" in head.source, f"{at}: no Binder badge linking to {binder_url(name)}; {STAMP}")

    names, readme = same_edition(name), WORDS[edition(name)]["readme"]
    i = names.index(name)
    expected = {  # links within the edition's folder, so by file name
        "previous": (title(names[i - 1]), names[i - 1].split("/")[-1]) if i > 0 else readme,
        "next": (title(names[i + 1]), names[i + 1].split("/")[-1]) if i + 1 < len(names) else readme,
    }
    found = {
        "previous": re.findall(r"←\s*\[([^\]]*)\]\(([^)\s]+)\)", head.source),
        "next": re.findall(r"\[([^\]]*)\]\(([^)\s]+)\)\s*→", head.source),
    }
    for which in ("previous", "next"):
        links = found[which]
        check(len(links) == 1, f"{at}: needs exactly one {which} link, found {len(links)}; {STAMP}")
        (text, target), (want_text, want_target) = links[0], expected[which]
        check(target == want_target, f"{at}: {which} link points to {target}, expected {want_target}; {STAMP}")
        check(text == want_text, f"{at}: {which} link is titled {text!r}, expected {want_text!r}; {STAMP}")
    twin = twin_link(name)
    if twin:
        check(re.search(rf"→ · \[[^\]]+\]\({re.escape(twin)}\)\n{NAV_END}", head.source),
              f"{at}: the nav must end with a link to the other edition, {twin}; {STAMP}")


@notebooks
def test_second_cell_is_the_setup_cell(name):
    """The stamped setup cell, word for word (tests/test_setup_cell.py runs it for real)."""
    nb = read(name)
    check(len(nb.cells) > 1, f"{name}: has no second cell (the setup cell); {STAMP}")
    cell = nb.cells[1]
    at = where(name, 1, cell)
    setup = SETUP_ZH if edition(name) == "zh" else SETUP
    check(cell.cell_type == "code" and cell.source == setup, f"{at}: the second cell must be the setup cell; {STAMP}")
    check(is_compared(cell), f"{at}: the setup cell's output must be compared (it is one fixed line)")
    printed, expected = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream"), \
        WORDS[edition(name)]["setup_prints"]
    check(printed == expected, f"{at}: in the test configuration it prints {expected!r}, not {printed!r}; "
                               "run tools/execute_notebooks.py on the notebook")


def test_setup_cell_never_lets_pip_replace_torch():
    """pip gets torch pinned to the installed version, and no option that upgrades or reinstalls."""
    check("pin.write(f\"torch=={torch_version}\\n\")" in SETUP and '"-c", pin.name' in SETUP,
          "the setup cell must pass pip a constraint torch==<installed version>")
    for option in ("-U", "--upgrade", "--force-reinstall", "-I", "--ignore-installed", "--upgrade-strategy"):
        check(f'"{option}"' not in SETUP, f"the setup cell passes pip {option}, which could replace the host's torch")


@notebooks
def test_code_cells_executed_in_order(name):
    for n, (i, cell) in enumerate(code_cells(read(name)), start=1):
        at = where(name, i, cell)
        check(cell.execution_count is not None or not cell.outputs, f"{at}: has outputs but no execution count")
        check(cell.execution_count == n, f"{at}: execution count {cell.execution_count}, expected {n}; "
                                         "run tools/execute_notebooks.py on the notebook")


@notebooks
def test_no_errors_unless_expected(name):
    for i, cell in code_cells(read(name)):
        if "raises-exception" in tags(cell):
            continue
        for output in cell.outputs:
            check(output.output_type != "error",
                  f"{where(name, i, cell)}: stored error {output.get('ename')}: {output.get('evalue')} "
                  "(tag the cell raises-exception if the error is the lesson)")


@notebooks
def test_no_local_paths_in_outputs(name):
    for i, cell in code_cells(read(name)):
        for output in cell.outputs:
            for text in output_texts(output):
                m = LOCAL_PATH.search(text)
                if m:
                    line = next(line for line in text.splitlines() if m.group(0) in line)
                    check(False, f"{where(name, i, cell)}: an output shows a path on this machine "
                                 f"({m.group(0)!r}): {line.strip()[:200]!r}")


@notebooks
def test_kernelspec(name):
    spec = read(name).metadata.get("kernelspec", {})
    check(spec.get("name") == "python3", f"{name}: kernelspec name is {spec.get('name')!r}, expected 'python3'")


@notebooks
def test_most_outputs_are_compared(name):
    with_output = [(i, c) for i, c in code_cells(read(name)) if c.outputs]
    ignored = [i for i, c in with_output if not is_compared(c)]
    compared = len(with_output) - len(ignored)
    check(3 * compared >= 2 * len(with_output),
          f"{name}: only {compared} of {len(with_output)} code cells with output are compared by nbval "
          f"(at least two thirds must be); ignored or skipped: cells {ignored}")


@notebooks
def test_has_settings_cell(name):
    check(any("quick_mode()" in c.source for _, c in code_cells(read(name))),
          f"{name}: no settings cell (QUICK = tudui.quick_mode() ...)")


def stamp_tool(notebooks, readmes):
    """tools/stamp_notebooks.py, working on the folder ``notebooks`` and the README files ``readmes``."""
    spec = importlib.util.spec_from_file_location("stamp_notebooks_under_test", TOOLS / "stamp_notebooks.py")
    stamp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stamp)
    stamp.NOTEBOOKS, stamp.READMES = notebooks, readmes  # the real notebooks and READMEs are never written
    return stamp


@pytest.fixture(scope="module")
def restamped(tmp_path_factory):
    """A copy of the notebooks folder after tools/stamp_notebooks.py has run on it."""
    copy = tmp_path_factory.mktemp("notebooks")
    (copy / "zh").mkdir()
    for name in NAMES:
        shutil.copy2(NOTEBOOKS / name, copy / name)
    stamp_tool(copy, [Path(shutil.copy2(ROOT / readme, copy / readme)) for readme in READMES]).main([])
    return copy


def small_lesson(path, heading, en_sha=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {heading}\n\nText."), nbformat.v4.new_code_cell("QUICK = True")]
    if en_sha:
        nb.cells[0].metadata["zh"] = {"en_sha": en_sha}
    nbformat.write(nb, path)


def test_stamping_links_the_editions_and_keeps_a_translation_in_step(tmp_path, capsys):
    """Two English lessons, a Chinese twin of the second only (translating its first cell as it is now)."""
    folder = tmp_path / "notebooks"
    (folder / "zh").mkdir(parents=True)
    small_lesson(folder / "01-a.ipynb", "01 · A")
    small_lesson(folder / "02-b.ipynb", "02 · B")
    small_lesson(folder / "zh" / "02-b.ipynb", "02 · 乙", en_sha=source_sha(read(folder / "02-b.ipynb").cells[0].source))
    readme = tmp_path / "README.zh.md"
    readme.write_text("| # | Notebook | 你会学到 | Colab | Kaggle | Binder |\n|---|---|---|---|---|---|\n"
                      "| 01 | [甲](notebooks/01-a.ipynb) | 一 | x | x | x |\n| 02 | [乙](notebooks/02-b.ipynb) | 二 | x | x | x |\n",
                      encoding="utf-8")
    stamp = stamp_tool(folder, [readme])
    stamp.main([])
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if "01-a" in line and "zh/" in line] == [
        "no Chinese twin: notebooks/zh/01-a.ipynb (skipped; create it with tools/translate.py)"]
    en1, en2, zh2 = (read(folder / name) for name in ("01-a.ipynb", "02-b.ipynb", "zh/02-b.ipynb"))
    assert "zh/01-a.ipynb" not in en1.cells[0].source  # no link to a twin that is not there
    assert en2.cells[0].source.endswith("← [01 · A](01-a.ipynb) · [README](../README.md) → · [中文](zh/02-b.ipynb)\n"
                                        f"{NAV_END}\n\nText.")
    assert zh2.cells[0].source.endswith("← [课程目录](../../README.zh.md) · [课程目录](../../README.zh.md) → · "
                                        f"[English](../02-b.ipynb)\n{NAV_END}\n\nText.")
    assert f"({colab_url('zh/02-b.ipynb')})" in zh2.cells[0].source
    assert zh2.cells[0].metadata["zh"]["en_sha"] == source_sha(en2.cells[0].source)  # only the nav changed
    assert [c.source for c in zh2.cells[1:]] == [SETUP_ZH, "QUICK = True"]
    assert [o.text for o in zh2.cells[1].outputs] == ["tudui 已经装好了\n"]
    rows = readme.read_text(encoding="utf-8").splitlines()
    assert rows[0].endswith("| Binder | English |") and rows[1] == "|---|---|---|---|---|---|---|"
    assert rows[2] == f"| 01 | [甲](notebooks/01-a.ipynb) | 一 | {' | '.join(badges('01-a.ipynb'))} | [English](notebooks/01-a.ipynb) |"
    assert rows[3] == (f"| 02 | [乙](notebooks/zh/02-b.ipynb) | 二 | {' | '.join(badges('zh/02-b.ipynb'))} | "
                       "[English](notebooks/02-b.ipynb) |")
    files = sorted(folder.rglob("*.ipynb")) + [readme]
    before = [f.read_bytes() for f in files]
    stamp.main([])
    assert [f.read_bytes() for f in files] == before  # a second run changes nothing


def test_stamping_leaves_a_stale_translation_stale(tmp_path):
    folder = tmp_path / "notebooks"
    (folder / "zh").mkdir(parents=True)
    small_lesson(folder / "01-a.ipynb", "01 · A")
    small_lesson(folder / "zh" / "01-a.ipynb", "01 · 甲", en_sha="0123456789abcdef")
    stamp_tool(folder, []).main([])
    assert read(folder / "zh" / "01-a.ipynb").cells[0].metadata["zh"]["en_sha"] == "0123456789abcdef"


@notebooks
def test_stamping_changes_nothing(name, restamped):
    if (restamped / name).read_bytes() == (NOTEBOOKS / name).read_bytes():
        return
    before, after = read(name), read(restamped / name)
    changes = []
    matcher = difflib.SequenceMatcher(a=[c.source for c in before.cells], b=[c.source for c in after.cells],
                                      autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op in ("replace", "delete"):
            changes += [f"{where(name, i, before.cells[i])} would change" for i in range(a0, a1)]
        if op in ("insert", "replace") and b1 - b0 > a1 - a0:
            changes += [f"{where(name, i, after.cells[i])} would be inserted" for i in range(b0 + a1 - a0, b1)]
    if before.metadata != after.metadata:
        changes.append(f"{name}: its metadata would change (kernelspec)")
    check(False, f"{name}: tools/stamp_notebooks.py would change it: {'; '.join(changes) or 'formatting'}; "
                 "run it and keep the result")


@pytest.mark.parametrize("readme_name", READMES)
def test_stamping_leaves_the_readme_tables_as_they_are(readme_name, restamped):
    check((restamped / readme_name).read_text(encoding="utf-8") == (ROOT / readme_name).read_text(encoding="utf-8"),
          f"{readme_name}: tools/stamp_notebooks.py would change its lesson table; run it and keep the result")


@pytest.mark.parametrize("readme_name", READMES)
@pytest.mark.parametrize("name", ENGLISH)
def test_readme_lists_the_notebook_with_its_launch_links(name, readme_name):
    """README.md lists the English lessons; README.zh.md the Chinese ones (the English until a lesson has
    its twin), with a last column linking the English."""
    readme = (ROOT / readme_name).read_text(encoding="utf-8")
    row = next((line for line in readme.splitlines() if line.startswith(f"| {name[:2]} | ")), "")
    listed, ending = name, badges(name)
    if readme_name == "README.zh.md":
        listed = f"zh/{name}" if f"zh/{name}" in CHINESE else name
        ending = badges(listed) + [f"[English](notebooks/{name})"]
    check(f"](notebooks/{listed})" in row.split(" | ")[1], f"{readme_name}: the notebook table has no row linking "
                                                            f"notebooks/{listed}; {STAMP}")
    check(row.endswith(" | ".join(ending) + " |"), f"{readme_name}: the row of {listed} lacks its Colab, Kaggle and "
                                                   f"Binder badges{' and its English link' if readme_name == 'README.zh.md' else ''}; {STAMP}")


def kernel_prints(code):
    """What a notebook kernel, started as nbval starts it, prints for ``code``."""
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, RunningKernel

    kernel = RunningKernel(CURRENT_ENV_KERNEL_NAME, cwd=str(NOTEBOOKS))
    try:
        msg_id = kernel.execute_cell_input(code)
        printed = []
        while True:
            msg = kernel.get_message("iopub", timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(printed)
    finally:
        kernel.stop()


@pytest.mark.parametrize("nvidia_gpu", [False, True], ids=["cpu-machine", "gpu-machine"])
def test_notebook_kernels_get_no_gpu_and_the_test_configuration(nvidia_gpu, monkeypatch):
    """On a GPU machine the kernels see no GPU, so they print the stored CPU outputs; elsewhere nothing is hidden."""
    import execute_notebooks

    which = shutil.which
    monkeypatch.setattr(execute_notebooks.shutil, "which",
                        lambda name, *a, **k: ("/usr/bin/nvidia-smi" if nvidia_gpu else None) if name == "nvidia-smi"
                        else which(name, *a, **k))
    expected = {"CUDA_VISIBLE_DEVICES": "" if nvidia_gpu else None, "TUDUI_DATA": "synthetic", "TUDUI_QUICK": "1"}
    before = dict(os.environ)
    seen = kernel_prints(f"import os; print({{k: os.environ.get(k) for k in {sorted(expected)!r}}})")
    check(seen.strip() == str(expected),
          f"a notebook kernel of the test run sees {seen.strip()}, expected {expected} (see the root conftest.py)")
    check(dict(os.environ) == before, "starting a notebook kernel changed the test process's environment")
