"""The package's shape: the lessons' code apart from the tool, and small functions a reader can take in at once."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tudui"
MAX_FUNCTION_LINES = 35


def long_functions(source: str) -> list:
    """(name, lines) of every function in ``source`` longer than MAX_FUNCTION_LINES, docstring included."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_is_longer_than_35_lines(path):
    assert long_functions(path.read_text(encoding="utf-8")) == []


def test_a_long_function_is_found():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def short():\n    pass\n\n\ndef long():\n{body}\n") == [("long", MAX_FUNCTION_LINES + 1)]


def test_import_tudui_loads_nothing_of_the_tool():
    """``import tudui`` and the lessons' names load the lessons' modules only, never tudui.cli."""
    import subprocess
    import sys
    code = ("import sys, tudui; tudui.fit, tudui.save_checkpoint, tudui.loaders, tudui.show_recorded; "
            "print(sorted(m for m in sys.modules if m.startswith('tudui')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "tudui.checkpoint" in loaded and "tudui.cli" not in loaded, loaded
