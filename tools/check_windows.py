"""Static check for Windows: no use of an API that Windows' Python lacks.

mypy, told the platform is Windows (``--platform win32``), knows which functions of ``os``,
``signal`` and friends exist there; each "Module has no attribute" it reports is a call that
would fail on Windows (``os.pathconf``, ``os.geteuid``, ``signal.SIGKILL`` ...). Code guarded by
``if sys.platform != "win32":`` is skipped, as Windows would skip it.
Usage: python tools/check_windows.py [PATH ...]   (default: tudui tools tests benchmarks)
Exit 1, one line per place, when something is found.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["tudui", "tools", "tests", "benchmarks"]


def _missing_attributes(paths, platform) -> set:
    from mypy import api

    out, _, _ = api.run(["--platform", platform, "--check-untyped-defs", "--ignore-missing-imports",
                         "--follow-imports=skip", "--no-error-summary", "--cache-dir", os.devnull, *map(str, paths)])
    return {line for line in out.splitlines() if "Module has no attribute" in line}


def unix_only_calls(paths) -> list:
    """The "Module has no attribute" errors that mypy reports for Windows and not for Linux:
    the APIs these files use that only Windows' Python lacks."""
    return sorted(_missing_attributes(paths, "win32") - _missing_attributes(paths, "linux"))


def main(argv) -> int:
    found = unix_only_calls(argv or [ROOT / p for p in DEFAULT])
    for line in found:
        print(f"not on Windows: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
