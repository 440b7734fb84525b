#!/usr/bin/env bash
# One voicewire process per GPU (configs/vllm-8gpu.yaml or any profile), ports BASE_PORT + i.
# Put a least-connections load balancer in front (docs/deployment.md); a WebSocket stays on the
# process it connected to. Usage: scripts/serve_gpus.sh PROFILE GPUS [BASE_PORT]
set -euo pipefail
profile=${1:?profile YAML}
gpus=${2:?number of GPUs}
base=${3:-8000}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
for ((i = 0; i < gpus; i++)); do
  CUDA_VISIBLE_DEVICES=$i voicewire serve --config "$profile" --port $((base + i)) &
  pids+=($!)
done
wait -n
