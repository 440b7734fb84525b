#!/usr/bin/env bash
# The service benchmark as docs/benchmarks.md reports it: a random real-size checkpoint, `voicewire
# serve` in its own process with configs/gpu.yaml, and `voicewire bench` against it over loopback.
# Usage: scripts/bench_gpu.sh SIZE LEVELS OUT_PREFIX ["NAME: BENCH ARGS" ...]
#   (e.g. 0.6b 1,8,64,256 results/0.6b "busy: --streams 256 --text-rate 0 --sessions-per-stream 10 --cancel-every 0")
# Writes OUT_PREFIX.json, .md, .serve.log and .metrics.txt (the Prometheus metrics of every server and engine process after the run).
# Each further "NAME: ARGS" is one more `voicewire bench` on the same server (a fresh H100 takes
# ~4 minutes to start one), with --frames and ARGS, written to OUT_PREFIX.NAME.json, .md and .metrics.txt.
# Settings from the environment: CONFIG (the server's profile, configs/gpu.yaml), FRAMES (100),
# RATE (20 words/s), PORT (8000), PYTHON (python3),
# WORKERS (server processes; default: the profile's server.workers), SESSIONS (sessions each stream
# runs back to back; default 1), CANCEL_EVERY (cancel every Nth session after 0.4 s of audio;
# default 4; 0 keeps every stream busy to the end, as the underrun target wants).
set -euo pipefail
size=${1:?size: 0.6b or 1.7b}
levels=${2:?levels, e.g. 1,8,64,256}
out=${3:?output prefix}
py=${PYTHON:-python3}
port=${PORT:-8000}
model=$("$py" -c "from voicewire.engine.model.random_checkpoint import random_checkpoint; print(random_checkpoint('custom_voice', '$size'))")
"$py" -m voicewire.server.cli serve --config "${CONFIG:-configs/gpu.yaml}" --model "$model" --port "$port" \
  ${WORKERS:+--workers "$WORKERS"} >"$out.serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 900); do  # a fresh machine compiles the fused kernels first (minutes)
  if "$py" -c "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$port/ready').status != 200)" 2>/dev/null; then
    break
  fi
  kill -0 $server 2>/dev/null || { tail -20 "$out.serve.log"; exit 1; }
  sleep 1
done
run() {  # run OUT_NAME BENCH_ARGS...: one bench, its table, and the server's metrics after it
  local name=$1
  shift
  "$py" -m voicewire.server.cli bench --url "ws://127.0.0.1:$port" --frames "${FRAMES:-100}" "$@" \
    --out "$name.json" --markdown "$name.md" >/dev/null
  # The server's own view (first audio measured at the server, per context) next to the client's.
  "$py" -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode())" >"$name.metrics.txt"
  cat "$name.md"
}
run "$out" --streams "$levels" --text-rate "${RATE:-20}" --sessions-per-stream "${SESSIONS:-1}" \
  --cancel-every "${CANCEL_EVERY:-4}"
for spec in "${@:4}"; do
  read -ra args <<<"${spec#*:}"
  run "$out.${spec%%:*}" "${args[@]}"
done
