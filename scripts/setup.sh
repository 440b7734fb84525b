#!/usr/bin/env bash
# Creates the project virtualenv and installs system + Python dependencies.
# Usage: scripts/setup.sh PYTHON VENV TORCH_SPEC [runtime|dev]
#   runtime (make serve): the server and its dependencies; dev (make test): also the test tools.
set -euo pipefail
python_bin=${1:-python3}
venv=${2:-.venv}
torch_spec=${3:-torch==2.13.0}
what=${4:-runtime}
pip_quiet=(-q --disable-pip-version-check)

need_pkgs=()
ldconfig -p 2>/dev/null | grep -q 'libopus\.so\.0' || need_pkgs+=(libopus0)
bash "$(dirname "$0")/apt_install.sh" "${need_pkgs[@]+"${need_pkgs[@]}"}"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the virtualenv $venv"
  "$python_bin" -m venv "$venv" || { echo "setup: '$python_bin -m venv' failed; install python3-venv." >&2; exit 1; }
fi
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: installing PyTorch ($torch_spec)"
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" "$torch_spec"
fi
if [ "$what" = dev ]; then
  echo "setup: installing the test tools (pytest, ruff, mypy, Triton for the kernels' tests)"
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" -e ".[dev]"
else
  echo "setup: installing voicewire and its dependencies"
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" -e .
fi
echo "setup: ready in $venv ($what)"
