#!/usr/bin/env bash
# Wheels of the server's dependencies for a GPU host that has CUDA PyTorch but no internet (a lent
# benchmark machine), plus Debian's libopus0 for opuslib. On that host, from the repo root:
#   dpkg -x .whl/libopus0_*.deb / && ldconfig
#   python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl
#   mkdir -p /tmp/vw/voicewire && for d in engine server client; do ln -sfn "$PWD/$d" /tmp/vw/voicewire/$d; done
#   export PYTHONPATH=/tmp/vw:/tmp/site
# Usage: scripts/offline_wheels.sh [PYTHON_VERSION (3.12)] [DIR (.whl)]
set -euo pipefail
version=${1:-3.12}
dir=${2:-.whl}
mkdir -p "$dir"
# What pyproject.toml needs beyond torch, numpy, safetensors, tokenizers, pyyaml and huggingface_hub,
# which such a host's PyTorch image carries;
# pydantic (with its typing-extensions floor) and soundfile's cffi are not in it.
packages=(starlette uvicorn h11 msgpack websockets prometheus-client itsdangerous soxr soundfile
  cffi pycparser python-multipart lameenc pydantic pydantic-core annotated-types typing-inspection typing-extensions)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$dir" "${packages[@]}"
python3 -m pip wheel -q --no-deps -w "$dir" opuslib==3.0.1  # an sdist only: built here, pure Python
(cd "$dir" && apt-get download libopus0)
ls "$dir"
