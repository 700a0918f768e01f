"""tools/no_skips.py, the GPU check's pytest plugin: a skipped test fails the run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_gpu_check_fails_a_pytest_run_with_a_skip(tmp_path):
    (tmp_path / "test_x.py").write_text("import pytest\ndef test_a(): pass\n"
                                        "@pytest.mark.skip(reason='no GPU')\ndef test_b(): pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o",
                           "addopts=", "-p", "tools.no_skips", "-q", str(tmp_path / "test_x.py")], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no_skips: 1 test(s) skipped" in done.stdout, done.stdout + done.stderr
