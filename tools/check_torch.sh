#!/usr/bin/env bash
# Run the unit tests and every notebook (lax: cells must run, outputs are not compared) against one
# torch/torchvision pair, in a throwaway virtual environment.
#   tools/check_torch.sh 2.7.1 0.22.1 [VENV]   (default VENV: /tmp/tudui-torch-<version>; kept for reuse)
# Record each pair that passes in README.md ("Tested with").
set -euo pipefail
torch_version=${1:?usage: tools/check_torch.sh TORCH_VERSION TORCHVISION_VERSION [VENV]}
vision_version=${2:?usage: tools/check_torch.sh TORCH_VERSION TORCHVISION_VERSION [VENV]}
venv=${3:-/tmp/tudui-torch-$torch_version}
cd "$(dirname "$0")/.."
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# setuptools: the setup cell's test builds tudui without build isolation (old torch keeps an old one)
"$venv/bin/pip" install -q "torch==$torch_version" "torchvision==$vision_version" "setuptools>=70.1"
"$venv/bin/pip" install -q -r requirements.txt
"$venv/bin/python" -c "import torch, torchvision; print('torch', torch.__version__, '| torchvision', torchvision.__version__)"
# Unit tests, then the notebooks with --nbval-lax (stored outputs come from the newest torch).
"$venv/bin/python" -m pytest -q tests -p no:cacheprovider
"$venv/bin/python" -m pytest -q notebooks -p no:cacheprovider --nbval-lax --override-ini addopts= \
    --nbval-current-env -n 2 --dist loadscope
