#!/usr/bin/env bash
# Check every GPU path of the project in one go (under 8 minutes on one H200), and record the
# notebooks' GPU outputs. Needs torch, torchvision, pytest and pytest-xdist; no Jupyter, no network.
#
#   tools/gpu_check.sh [OUT_DIR]          on a machine with a CUDA GPU (default OUT_DIR: gpu-check-out)
#   tools/gpu_check.sh --cpu [OUT_DIR]    a dry run of the same steps on the CPU
#
# Writes into OUT_DIR: gpu_check.log, throughput-<device>.json, notebook-runs.tgz (every cell's output),
# recorded.tgz (the recordings: `tar xzf OUT_DIR/recorded.tgz -C notebooks` and commit them).
# Exit status 1 if any step failed; the log's last lines say which.
set -uo pipefail
DEVICE=cuda
if [ "${1:-}" = "--cpu" ]; then DEVICE=cpu; shift; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PY=$(cd "$ROOT" && command -v "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3}"; exit 2; }
case $PY in /*) ;; *) PY=$ROOT/$PY ;; esac   # the notebooks run in another folder
cd "$ROOT" || exit 2
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg TUDUI_DATA=synthetic
exec > >(tee "$OUT/gpu_check.log") 2>&1
FAILED=()
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name"; local start=$SECONDS
  timeout "$limit" "$@" || FAILED+=("$name (exit $?)")
  echo "--- $name: $((SECONDS - start)) s"
}

date -u +"%Y-%m-%dT%H:%M:%SZ"; git log -1 --format="commit %H" 2>/dev/null
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| CUDA', torch.version.cuda, '| GPUs', torch.cuda.device_count())"

step "tests marked gpu" 240 "$PY" -m pytest -p no:cacheprovider -o addopts="" -n 4 -q -rs -m gpu tests \
     --ignore=tests/test_notebooks.py
step "gpu_checks --device $DEVICE" 420 "$PY" tools/gpu_checks.py --device "$DEVICE"
if [ "$DEVICE" = cuda ]; then QUICK=(); JOBS=4; else QUICK=(--quick); JOBS=1; fi
step "benchmarks/throughput.py --device $DEVICE ${QUICK[*]}" 300 "$PY" benchmarks/throughput.py \
     --device "$DEVICE" "${QUICK[@]}" --json "$OUT/throughput-$DEVICE.json"

# Every notebook, quick sizes, on this machine's device (its GPU cells run live); outputs recorded.
mkdir -p "$WORK/nb" "$WORK/runs" "$WORK/recorded"
cp notebooks/[0-9][0-9]-*.ipynb "$WORK/nb/"
run_notebook() {  # a copy runs in $WORK/nb, so the files the lessons write stay out of the repository
  TUDUI_QUICK=1 timeout 300 "$PY" "$ROOT/tools/run_notebook_cells.py" "$WORK/nb/$1" "$WORK/runs/${1%.ipynb}.json" \
    --workdir "$WORK/nb" 2>"$WORK/runs/${1%.ipynb}.log" || { echo "!!! $1 failed:"; tail -n 20 "$WORK/runs/${1%.ipynb}.log"; }
}
export -f run_notebook; export PY WORK ROOT
echo "=== notebooks (runner)"
(cd "$WORK/nb" && ls [0-9][0-9]-*.ipynb | xargs -P "$JOBS" -I{} bash -c 'run_notebook {}') | tee "$WORK/notebooks.txt"
grep -q '^!!!' "$WORK/notebooks.txt" && FAILED+=("notebooks")
ALLOW=(); [ "$DEVICE" = cpu ] && ALLOW=(--allow-cpu)   # a dry run records the CPU, to test the recording
step "record outputs" 60 "$PY" tools/record_outputs.py "$WORK"/runs/*.json --out "$WORK/recorded" "${ALLOW[@]}"
tar czf "$OUT/notebook-runs.tgz" -C "$WORK" runs
tar czf "$OUT/recorded.tgz" -C "$WORK" recorded

echo "=== done in $SECONDS s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
if [ ${#FAILED[@]} -gt 0 ]; then printf 'FAILED: %s\n' "${FAILED[@]}"; exit 1; fi
echo "all steps passed"
