#!/usr/bin/env bash
# Sweep `voicewire bench-engine` over concurrency and text rate; one JSON report per line in $1.
# Settings from the environment: SIZE (0.6b), DEVICE (cuda), DTYPE (bfloat16), FRAMES (100),
# STREAMS ("1 8 64"), RATES ("0 20": tokens/s, 0 = all text at once), KV (512), PYTHON (python3).
set -euo pipefail
out=${1:?usage: bench_engine_sweep.sh OUT.jsonl}
py=${PYTHON:-python3}
: >"$out"
for rate in ${RATES:-0 20}; do
  for n in ${STREAMS:-1 8 64}; do
    "$py" -m voicewire.server.cli bench-engine --size "${SIZE:-0.6b}" --device "${DEVICE:-cuda}" \
      --dtype "${DTYPE:-bfloat16}" --streams "$n" --frames "${FRAMES:-100}" --text-rate "$rate" \
      --kv-length "${KV:-512}" --out "$out.one" >/dev/null
    "$py" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$out.one" >>"$out"
  done
done
rm -f "$out.one"
