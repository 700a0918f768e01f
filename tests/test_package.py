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


BUDGETS = {"the package, exercises apart": 2700, "the lessons' modules (tudui/*.py)": 1200, "tudui/exercises/": 500}


def physical_lines(paths) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in paths)


def test_the_package_stays_within_its_line_budgets():
    """Physical lines of Python: a reader can still take the package in (each part has its own budget)."""
    exercises = next((PACKAGE / name for name in ("exercises", "exercise") if (PACKAGE / name).is_dir()),
                     PACKAGE / "exercises")
    counts = {"the package, exercises apart": physical_lines(p for p in PACKAGE.rglob("*.py")
                                                            if exercises not in p.parents),
              "the lessons' modules (tudui/*.py)": physical_lines(PACKAGE.glob("*.py")),
              "tudui/exercises/": physical_lines(exercises.rglob("*.py"))}
    over = {part: f"{counts[part]} > {most}" for part, most in BUDGETS.items() if counts[part] > most}
    assert not over, over


def test_physical_lines_count_every_line_blank_and_comment_too(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n\n# note\n")
    (tmp_path / "b.py").write_text("y = 2")
    assert physical_lines(tmp_path.glob("*.py")) == 4


def test_import_tudui_loads_nothing_of_the_tool():
    """``import tudui`` and the lessons' names load the lessons' modules only, never tudui.cli."""
    import subprocess
    import sys
    code = ("import sys, tudui; tudui.fit, tudui.save_checkpoint, tudui.loaders, tudui.show_recorded; "
            "print(sorted(m for m in sys.modules if m.startswith('tudui')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "tudui.checkpoint" in loaded and "tudui.cli" not in loaded, loaded
