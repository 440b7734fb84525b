#!/usr/bin/env bash
# Creates the project virtualenv and installs system + Python dependencies.
# Usage: scripts/setup.sh PYTHON VENV TORCH_SPEC
set -euo pipefail
python_bin=${1:-python3}
venv=${2:-.venv}
torch_spec=${3:-torch==2.13.0}

need_pkgs=()
ldconfig -p 2>/dev/null | grep -q 'libopus\.so\.0' || need_pkgs+=(libopus0)
bash "$(dirname "$0")/apt_install.sh" "${need_pkgs[@]+"${need_pkgs[@]}"}"

if [ ! -x "$venv/bin/python" ]; then
  "$python_bin" -m venv "$venv" || { echo "setup: '$python_bin -m venv' failed; install python3-venv." >&2; exit 1; }
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$torch_spec"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]"
echo "setup: ready in $venv"
