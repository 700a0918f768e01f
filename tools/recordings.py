"""What the recording tools and tests need to know about recordings: the hash of a cell, the calls in it.

A recording (tudui/recordings/NN-name.json) is tied to its cell's source by this hash, and to the
cell's ``show_recorded("NN-name", "key", ...)`` call by its notebook and key.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "tudui" / "recordings"
# show_recorded("03-to-device", "assignment", ...): the notebook and key a cell names
CALL = re.compile(r"""show_recorded\(\s*(['"])([^'"]+)\1\s*,\s*(['"])([^'"]+)\3""")


def source_sha(source: str) -> str:
    """The hash a recording keeps of its cell's source (stale when the source changes)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def calls_in(source: str) -> list:
    """The (notebook, key) pairs of the show_recorded calls in a cell's source."""
    return [(m.group(2), m.group(4)) for m in CALL.finditer(source)]
