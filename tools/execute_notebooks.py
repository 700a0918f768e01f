"""Re-execute notebooks in the test configuration and store their outputs.

The test configuration is what CI compares against: CPU, no network, the
synthetic stand-in for CIFAR-10, quick sizes, fixed seeds.
Usage: python tools/execute_notebooks.py [notebooks/NN-name.ipynb ...]  (default: all, both editions)
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
TEST_ENV = {"TUDUI_DATA": "synthetic", "TUDUI_QUICK": "1"}


def kernel_env() -> dict:
    """What a notebook kernel gets (here and in the test run): the test configuration and no GPU.

    GPUs are hidden only where there are some, so outputs made on a CPU machine carry no trace of it.
    """
    return {**TEST_ENV, **({"CUDA_VISIBLE_DEVICES": ""} if shutil.which("nvidia-smi") else {})}


def execute(path: Path) -> float:
    import nbformat  # here, not above: the test configuration is read where Jupyter is missing too
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # stops at the first unexpected error (cells tagged raises-exception may raise)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv):
    os.environ.update(kernel_env())  # the kernel inherits this environment
    paths = [Path(p).resolve() for p in argv] or sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")) + sorted(
        NOTEBOOKS.glob("zh/[0-9][0-9]-*.ipynb"))
    for path in paths:
        print(f"{path.name}: {execute(path):.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
