"""Turn notebook runs on a GPU into recordings the notebooks show on machines without one.

Reads runs written by tools/run_notebook_cells.py. Every cell that calls
``tudui.show_recorded("NN-name", "key", ...)`` gets its run's output recorded in
``OUT/NN-name.json`` under its cell id (the format: tudui/recordings/README.md).

Usage: python tools/record_outputs.py RUN.json [RUN.json ...] [--out tudui/recordings] [--allow-cpu]
Exit 2 if a run could not be recorded (each such run in one line on stderr; the others are recorded).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from recordings import FOLDER, calls_in

DEFAULT_OUT = FOLDER
NOT_LIVE = "No GPU here."  # how show_recorded's output starts


class RecordError(Exception):
    """A run that cannot be recorded: reported in one line."""


def entry(run: dict, cell: dict, key: str) -> dict:
    return {"key": key, "source_sha": cell["source_sha"], "outputs": cell["outputs"],
            "device": run["device"], "torch": run["torch"], "date": run["date"],
            "settings": run.get("settings", ""), "commit": run.get("commit", "")}


def recordings(run: dict, allow_cpu: bool = False) -> dict:
    """{cell id: entry} for the cells of one run that show a recording on machines without a GPU."""
    name, found = run["notebook"], {}
    for cell in run["cells"]:
        calls = calls_in(cell["source"])
        if not calls:
            continue
        where = f"{name} cell {cell['index']} (id {cell['id']})"
        if not cell["id"]:
            raise RecordError(f"{where}: the notebook has no cell ids; save it with nbformat 4.5 or later")
        if len(calls) > 1 or calls[0][0] != name:
            raise RecordError(f"{where}: needs exactly one show_recorded({name!r}, KEY, ...) call, found {calls}")
        if cell["error"]:
            raise RecordError(f"{where}: failed in this run ({cell['error']}); fix it and run again")
        if not allow_cpu and "".join(cell["outputs"]).startswith(NOT_LIVE):
            raise RecordError(f"{where}: showed a recording or placeholder, not its GPU branch; record a "
                              "run on a machine where that branch runs")
        found[cell["id"]] = entry(run, cell, calls[0][1])
    return found


def record(run_path: Path, out: Path, allow_cpu: bool = False):
    """Write the recordings of one run into ``out``; returns the file written (None: nothing to record)."""
    run = json.loads(run_path.read_text(encoding="utf-8"))
    if run["device"] is None:
        raise RecordError(f"{run_path}: the run stopped after {len(run['cells'])} code cells; nothing recorded")
    if run["device"].startswith("CPU") and not allow_cpu:
        raise RecordError(f"{run_path}: ran on {run['device']}; recordings must come from a GPU run")
    found = recordings(run, allow_cpu)
    if not found:
        return None
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{run['notebook']}.json"
    target.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return target


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: tudui/recordings")
    p.add_argument("--allow-cpu", action="store_true", help="record a CPU run (to test the recording itself)")
    args = p.parse_args(argv)
    failed = 0
    for path in args.runs:  # one run that cannot be recorded does not keep the others from being recorded
        try:
            target = record(path, args.out, args.allow_cpu)
        except (RecordError, OSError, KeyError, TypeError, ValueError) as exc:
            print(f"record_outputs: error: {exc}", file=sys.stderr)
            failed += 1
        else:
            print(f"{path.name}: {f'recorded in {target}' if target else 'no cell calls show_recorded'}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
