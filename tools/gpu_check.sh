#!/usr/bin/env bash
# Check every GPU path of the project in one go, and record the notebooks' GPU outputs: under 9 minutes
# on one H200. Needs Python 3.10+, torch, torchvision, pytest, pytest-xdist, matplotlib, tqdm; no Jupyter,
# no network (synthetic data).
#
#   TESTED_COMMIT=$(git rev-parse HEAD) tools/gpu_check.sh [OUT_DIR]   on a machine with a CUDA GPU
#   tools/gpu_check.sh --cpu [OUT_DIR]    a dry run of the same steps on the CPU
#   PYTHON=.venv/bin/python tools/gpu_check.sh ...   another Python than python3
# (default OUT_DIR: gpu-check-out). TESTED_COMMIT names the commit tested, for a copy without .git.
#
# Writes 4 files into OUT_DIR: gpu_check.log, throughput-<device>.json (benchmarks/throughput.py, full
# sizes on a GPU), notebook-runs.tgz (every cell's output and each notebook's stderr), and the recordings:
# recorded.tgz on a GPU (README.md, "The GPU check", says how to install them), recorded-cpu-dry-run.tgz
# on a dry run (never installed: tests/test_recorded.py refuses recordings made without a GPU).
# Exit status 1 if any step failed (the log's last lines say which), 2 if there is no GPU.
#
# The correctness checks (tests marked gpu, tools/gpu_checks.py, the notebooks whose recorded cells measure
# nothing) run side by side; then, one at a time on an otherwise idle machine, the GPU timing test, the
# benchmark and the notebooks whose recorded cells measure time, speed or memory (tools/recordings.py
# decides which). Every step has a time limit, and all end within BUDGET; recording and packing run after
# them whatever happened (seconds).
set -uo pipefail
DEVICE=cuda
if [ "${1:-}" = "--cpu" ]; then DEVICE=cpu; shift; fi
BUDGET=450 SCALE=1                        # seconds for all the steps; then recording and packing (seconds)
[ $DEVICE = cpu ] && BUDGET=1500 SCALE=3  # a dry run: every step on the CPU, which takes longer
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd) || exit 2
PY=$(cd "$ROOT" && command -v "${PYTHON:-python3}") || { echo "gpu_check: error: no ${PYTHON:-python3}"; exit 2; }
case $PY in /*) ;; *) PY=$ROOT/$PY ;; esac   # the notebooks run in other folders
COMMIT=${TESTED_COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo "unknown (set TESTED_COMMIT)")}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT" || exit 2
for name in $(compgen -e | grep '^TUDUI_'); do unset "$name"; done   # the learner's settings stay out
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg TUDUI_DATA=synthetic
export DEADLINE=$(( $(date +%s) + BUDGET )) SCALE PY WORK TESTED_COMMIT=$COMMIT

limit() {  # limit SECONDS: SECONDS (times SCALE), or less where the budget has less left
  local want=$(( $1 * SCALE )) left=$(( DEADLINE - $(date +%s) ))
  echo $(( left < want ? left : want ))
}

step() {  # step NAME SECONDS COMMAND...: run it within its limit; a failure is noted in $WORK/failed
  local name=$1 seconds; seconds=$(limit "$2"); shift 2
  echo "=== $name (limit $seconds s)"; local start=$SECONDS rc
  if [ "$seconds" -lt 5 ]; then rc="no time left"; else
    timeout -k 10 "$seconds" "$@" </dev/null; rc=$?
    [ $rc -eq 124 ] && rc="stopped after $seconds s"
  fi
  [ "$rc" = 0 ] || echo "$name ($rc)" >> "$WORK/failed"
  echo "--- $name: $((SECONDS - start)) s"
}

run_notebook() {  # run_notebook NAME: a copy runs in a folder of its own (the files it writes stay there)
  mkdir -p "$WORK/nb/$1" && cp "notebooks/$1.ipynb" "$WORK/nb/$1/"
  TUDUI_QUICK=1 step "notebook $1" 150 "$PY" tools/run_notebook_cells.py "$WORK/nb/$1/$1.ipynb" \
    "$WORK/runs/$1.json" --workdir "$WORK/nb/$1" 2>"$WORK/runs/$1.log"
}

run_notebooks() {  # run_notebooks PARALLEL NAME...: their output in order, as each ends
  local jobs=$1; shift
  [ $# -eq 0 ] && return
  printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'run_notebook {} > "$WORK/{}.out" 2>&1; cat "$WORK/{}.out"'
}

SIDE=0
side_by_side() {  # side_by_side COMMAND...: run it in the background, its output kept in $WORK/side-N.out
  SIDE=$((SIDE + 1)); "$@" > "$WORK/side-$SIDE.out" 2>&1 &
}

header() {  # what runs where; fails when a GPU run finds no GPU
  date -u +"%Y-%m-%dT%H:%M:%SZ"; echo "commit $COMMIT"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(not set)}"
  command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi \
    --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  timeout 120 "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| CUDA', torch.version.cuda, '| GPUs', torch.cuda.device_count()); sys.exit('$DEVICE' == 'cuda' and not torch.cuda.is_available())" \
    || { echo "gpu_check: error: this torch sees no CUDA GPU; for a dry run on the CPU: $0 --cpu OUT_DIR"; return 2; }
}

main() {
  header || return 2
  mkdir -p "$WORK/runs" "$WORK/recordings"
  export -f limit step run_notebook

  local side=() alone=() phase name jobs=4
  while read -r phase name; do   # the notebooks in the folder, in order, by phase
    if [ "$phase" = alone ]; then alone+=("$name"); else side+=("$name"); fi
  done < <("$PY" tools/recordings.py notebooks)
  # On a GPU a skipped test checked nothing: it fails the step. On the CPU every test marked gpu skips.
  local strict=(-p tools.no_skips); [ "$DEVICE" = cpu ] && strict=() jobs=1
  echo "=== side by side: tests marked gpu, tools/gpu_checks.py, notebooks ${side[*]} (outputs follow)"
  side_by_side step "tests marked gpu" 180 "$PY" -m pytest -p no:cacheprovider "${strict[@]}" -o addopts="" \
    -n 4 -q -rs -m gpu tests --ignore=tests/test_notebooks.py --ignore=tests/test_timing.py
  side_by_side step "gpu_checks --device $DEVICE" 180 "$PY" tools/gpu_checks.py --device "$DEVICE"
  side_by_side run_notebooks "$jobs" "${side[@]}"
  wait; cat "$WORK"/side-*.out

  echo "=== one at a time: the GPU timing test, the benchmark, notebooks ${alone[*]}"
  step "tests marked gpu in tests/test_timing.py (CUDA events)" 60 "$PY" -m pytest -p no:cacheprovider \
    "${strict[@]}" -o addopts="" -p no:xdist -q -rs -m gpu tests/test_timing.py
  local quick=(); [ "$DEVICE" = cpu ] && quick=(--quick)   # full sizes on a GPU
  step "benchmarks/throughput.py --device $DEVICE ${quick[*]}" 200 "$PY" benchmarks/throughput.py \
    --device "$DEVICE" "${quick[@]}" --json "$OUT/throughput-$DEVICE.json"
  run_notebooks 1 "${alone[@]}"

  # Whatever happened above: record what finished, and pack it (no time limit of the budget's).
  local allow=() archive=recorded.tgz
  [ "$DEVICE" = cpu ] && allow=(--allow-cpu) archive=recorded-cpu-dry-run.tgz   # to test the recording itself
  echo "=== record outputs"
  timeout 60 "$PY" tools/record_outputs.py "$WORK"/runs/*.json --out "$WORK/recordings" "${allow[@]}" \
    || echo "record outputs" >> "$WORK/failed"
  tar czf "$OUT/notebook-runs.tgz" -C "$WORK" runs
  tar czf "$OUT/$archive" -C "$WORK" recordings
  echo "=== done in $SECONDS s (commit $COMMIT); files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  if [ -s "$WORK/failed" ]; then sed 's/^/FAILED: /' "$WORK/failed"; return 1; fi
  echo "all steps passed"
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
