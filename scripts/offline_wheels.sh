#!/usr/bin/env bash
# Wheels of the server's dependencies for a GPU host that has CUDA PyTorch but no internet (a lent
# benchmark machine), plus pytest's for the GPU-only tests and Debian's libopus0 for opuslib. On
# that host, from the repo root: `source scripts/device_env.sh` (it installs them and links the tree).
# Usage: scripts/offline_wheels.sh [PYTHON_VERSION (3.12)] [DIR (.whl)]
set -euo pipefail
version=${1:-3.12}
dir=${2:-.whl}
mkdir -p "$dir"
# What pyproject.toml needs beyond torch, numpy, safetensors, tokenizers, pyyaml and huggingface_hub,
# which such a host's PyTorch image carries;
# pydantic (with its typing-extensions floor) and soundfile's cffi are not in it.
packages=(starlette uvicorn h11 msgpack websockets prometheus-client itsdangerous soxr soundfile
  cffi pycparser python-multipart lameenc pydantic pydantic-core annotated-types typing-inspection typing-extensions
  pytest pluggy iniconfig hypothesis sortedcontainers pygments packaging)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$dir" "${packages[@]}"
python3 -m pip wheel -q --no-deps -w "$dir" opuslib==3.0.1  # an sdist only: built here, pure Python
(cd "$dir" && apt-get download libopus0)
ls "$dir"
