#!/usr/bin/env bash
# Sourced on a lent GPU host that has CUDA PyTorch and no internet, from the repo root, after
# scripts/offline_wheels.sh filled .whl where there is internet and the device call carried it
# (carry [".whl"]): installs the wheels into /tmp/site and Debian's libopus, links this tree's
# packages as the `voicewire` namespace under /tmp/vw, and exports PYTHONPATH, so
# `python3 -m voicewire.server.cli`, scripts/bench_gpu.sh, scripts/ab_servers.sh and pytest run the
# tree as it is (the tests import `tests.*` from it: PYTHONPATH ends with the tree).
#   source scripts/device_env.sh && python3 -m pytest -q -p no:cacheprovider tests/engine/kernels
_voicewire_device_env() {
  local dir=${WHEELS:-.whl} package
  ls "$dir"/*.whl "$dir"/libopus0_*.deb >/dev/null || return 1  # the call did not carry them
  # Compiled at install, as pip does by default: opuslib's `is not 0` is a SyntaxWarning, which
  # a first import would raise under the tests' `filterwarnings = error` (session 72).
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
    --target /tmp/site "$dir"/*.whl || return 1
  dpkg -x "$dir"/libopus0_*.deb / && ldconfig || return 1
  mkdir -p /tmp/vw/voicewire || return 1
  for package in engine server client bench integrations; do
    ln -sfn "$PWD/$package" "/tmp/vw/voicewire/$package" || return 1
  done
  export PYTHONPATH=/tmp/vw:/tmp/site:$PWD
}
_voicewire_device_env
