"""Run a notebook's code cells in one Python process, without Jupyter, and record what each printed.

For machines with torch but no Jupyter (a bare GPU image). Handles what the lessons use:
``%pip``/``%matplotlib`` lines (skipped), ``!command`` lines (run in a shell, output kept),
``%%writefile``, and the display of a cell's last expression. Cells tagged ``raises-exception``
must raise. Writes a JSON run (read by tools/record_outputs.py: each code cell's source, stdout,
stderr, seconds and error); exit 1 if a cell failed, after printing where.

Usage: python tools/run_notebook_cells.py NOTEBOOK.ipynb RUN.json [--workdir DIR]
(the cells run in DIR, default the notebook's folder; ``import tudui`` must work there)
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import io
import json
import os
import re
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

from recordings import source_sha  # noqa: E402

MAGIC = re.compile(r"^(\s*)([!%])(.*)$")


def shell(command: str) -> None:
    """``!command``: run it and print its output, as IPython does."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    print(done.stdout + done.stderr, end="")


def write_file(path: str, body: str) -> None:
    """``%%writefile path``: IPython's message, then the file."""
    print(f"{'Overwriting' if os.path.exists(path) else 'Writing'} {path}")
    Path(path).write_text(body, encoding="utf-8")


def to_python(source: str) -> str:
    """The cell as plain Python: magics become calls or ``pass``."""
    if source.startswith("%%writefile"):
        first, _, body = source.partition("\n")
        return f"_write_file({first.split(maxsplit=1)[1].strip()!r}, {body!r})"
    lines = []
    for line in source.splitlines():
        m = MAGIC.match(line)
        if m and m.group(2) == "!":
            lines.append(f"{m.group(1)}_shell({m.group(3)!r})")
        elif m:
            lines.append(f"{m.group(1)}pass  # {m.group(2)}{m.group(3)}")
        else:
            lines.append(line)
    return "\n".join(lines)


def run_code(code: str, namespace: dict, filename: str) -> None:
    """Execute a cell; show its last expression's repr as IPython does (not when it ends in ';')."""
    tree = ast.parse(code, filename)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
        if value is not None and not code.rstrip().endswith(";"):
            print(repr(value))


def run_cell(cell: dict, index: int, namespace: dict) -> dict:
    """Run one code cell; its stdout, stderr, seconds and error (``None`` when it worked as expected)."""
    source = "".join(cell["source"])
    expect_raise = "raises-exception" in cell.get("metadata", {}).get("tags", [])
    out, err, error = io.StringIO(), io.StringIO(), None
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_code(to_python(source), namespace, f"<cell {index}>")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any error is reported, with its cell
        first = str(exc).splitlines()[0] if str(exc) else ""
        error = None if expect_raise else f"{type(exc).__name__}: {first}"
        err.write(traceback.format_exc())
    else:
        if expect_raise:
            error = "tagged raises-exception, but raised nothing"
    return {"index": index, "id": cell.get("id"), "source": source, "source_sha": source_sha(source),
            "outputs": [out.getvalue()] if out.getvalue() else [], "stderr": err.getvalue(), "error": error,
            "seconds": round(time.perf_counter() - start, 3)}


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no GPU)"


def settings() -> str:
    """The run's settings, as a recording's label shows them: "quick sizes, synthetic data" in the GPU check."""
    import tudui  # the notebook has imported it already
    sizes = "quick sizes" if tudui.quick_mode() else "full sizes"
    return f"{sizes}, {'synthetic data' if os.environ.get('TUDUI_DATA') == 'synthetic' else 'CIFAR-10'}"


def run_notebook(path: Path, save) -> dict:
    """Run every code cell of ``path`` in the current directory, in one fresh ``__main__`` namespace;
    ``save(run)`` after each cell, so a run stopped by a time limit still shows how far it got."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    run = {"notebook": path.stem, "device": None, "torch": torch.__version__,
           "date": datetime.date.today().isoformat(), "cells": []}
    main = types.ModuleType("__main__")  # pickle finds the notebook's classes as __main__.X, as in Jupyter
    main.__dict__.update(_shell=shell, _write_file=write_file, __builtins__=__builtins__)
    real_main, sys.modules["__main__"] = sys.modules["__main__"], main
    try:
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "code":
                run["cells"].append(run_cell(cell, index, main.__dict__))
                save(run)
    finally:
        sys.modules["__main__"] = real_main
    run["settings"], run["commit"] = settings(), os.environ.get("TESTED_COMMIT", "")
    run["device"] = device_name()  # asked last: asking starts CUDA, which the lesson should do itself
    save(run)
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("run_json", type=Path)
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    notebook, out = args.notebook.resolve(), args.run_json.resolve()
    os.chdir(args.workdir or notebook.parent)
    run = run_notebook(notebook, lambda run: out.write_text(json.dumps(run, indent=1, ensure_ascii=False),
                                                             encoding="utf-8"))
    failed = [c for c in run["cells"] if c["error"]]
    for cell in failed:  # what went wrong, where: the end of each failed cell's traceback
        print(f"{notebook.name} cell {cell['index']} (id {cell['id']}): {cell['error']}")
        print("".join("    " + line for line in cell["stderr"].splitlines(keepends=True)[-12:]), end="")
    seconds = sum(c["seconds"] for c in run["cells"])
    print(f"{notebook.name}: {len(run['cells'])} code cells on {run['device']} in {seconds:.0f} s, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
