#!/usr/bin/env bash
# One voicewire process per GPU (configs/gpu.yaml, configs/vllm-8gpu.yaml or any profile) on port
# BASE_PORT + i with CUDA_VISIBLE_DEVICES=i, and with LB_BIND set HAProxy in front of them
# (configs/haproxy.cfg: least connections, WebSocket, health checks on /ready; docs/deployment.md).
# A WebSocket stays on the process it connected to. When any of these processes exits, the others
# are stopped too, for a supervisor to restart the whole.
# Usage: scripts/serve_gpus.sh PROFILE GPUS [BASE_PORT (8000)] [-- SERVE_ARGS...]
#   (e.g. LB_BIND=0.0.0.0:8080 scripts/serve_gpus.sh configs/gpu.yaml 2 8000 -- --workers 5)
# Settings from the environment:
#   LB_BIND: HAProxy's address for clients (HOST:PORT); unset: no load balancer
#   LB_STATS: HAProxy's statistics page (127.0.0.1:8404)
#   HAPROXY: the haproxy command (haproxy)
#   PYTHON: run `$PYTHON -m voicewire.server.cli` instead of the `voicewire` command
#   LOG_DIR: each server's output to LOG_DIR/serve_gpuI.log and HAProxy's to LOG_DIR/haproxy.log,
#     its generated config in LOG_DIR/haproxy.cfg (unset: the console, and a temporary folder)
#   PIN_CPUS=1: each server (its engine process and workers) on its own share of the CPUs this
#     script may use (taskset): whole physical cores, on its GPU's NUMA node where the host says
#     (server/gpu_cpus.py); HAProxy stays unpinned. Why: each engine process's scheduler and
#     decoder threads wait on the GPU and need a CPU the moment it answers; unpinned, the servers'
#     2 x (engine + workers) threads migrate across the same CPUs and wait behind each other's.
set -euo pipefail
profile=${1:?profile YAML}
gpus=${2:?number of GPUs}
shift 2
base=8000
if [[ $# -gt 0 && $1 != -- ]]; then
  base=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
serve_args=("$@")
if [[ -n ${PYTHON:-} ]]; then voicewire=("$PYTHON" -m voicewire.server.cli); else voicewire=(voicewire); fi

pids=()
trap 'trap - EXIT; kill "${pids[@]}" 2>/dev/null || true; wait' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
launch() {  # launch NAME COMMAND...: in the background, its output to LOG_DIR/NAME.log when set
  local name=$1
  shift
  if [[ -n ${LOG_DIR:-} ]]; then "$@" >"$LOG_DIR/$name.log" 2>&1 & else "$@" & fi
  pids+=($!)
}

if [[ -n ${LB_BIND:-} ]]; then
  # The checked-in config with its `server gpuN` lines replaced by one per GPU (its last section).
  cfg=${LOG_DIR:-$(mktemp -d)}/haproxy.cfg
  {
    sed '/^[[:space:]]*server gpu[0-9]/d' "$(dirname "$0")/../configs/haproxy.cfg"
    for ((i = 0; i < gpus; i++)); do printf '    server gpu%d 127.0.0.1:%d\n' "$i" $((base + i)); done
  } >"$cfg"
  haproxy=("${HAPROXY:-haproxy}" -db -f "$cfg")
  lb_env=(env VOICEWIRE_LB_BIND="$LB_BIND" VOICEWIRE_LB_STATS="${LB_STATS:-127.0.0.1:8404}")
  # A bad config stops us before minutes of server start-up.
  checked=$("${lb_env[@]}" "${haproxy[@]}" -c 2>&1) || { echo "$checked" >&2; exit 1; }
fi
# Each GPU's CPUs (PIN_CPUS=1): whole cores, on the GPU's NUMA node where the host says (server/gpu_cpus.py).
slices=()
if [[ ${PIN_CPUS:-0} == 1 ]]; then
  planned=$(python3 "$(dirname "$0")/../server/gpu_cpus.py" "$gpus")
  mapfile -t slices <<<"$planned"
fi
for ((i = 0; i < gpus; i++)); do
  pin=()
  if [[ ${PIN_CPUS:-0} == 1 ]]; then
    cpus=${slices[i]}
    echo "serve_gpus: GPU $i's server on CPUs $cpus" >&2
    pin=(taskset -c "$cpus")
  fi
  launch "serve_gpu$i" env CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="$i" "${pin[@]}" "${voicewire[@]}" serve --config "$profile" \
    --port $((base + i)) "${serve_args[@]}"
done
# HAProxy holds clients off (503) until a server's /ready says 200.
if [[ -n ${LB_BIND:-} ]]; then launch haproxy "${lb_env[@]}" "${haproxy[@]}"; fi
status=0
wait -n || status=$?
echo "serve_gpus: one of its processes exited (status $status); stopping the others" >&2
exit "$status"
