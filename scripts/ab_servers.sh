#!/usr/bin/env bash
# An A/B of builds on one GPU machine: for each TAG=TREE, a fresh `voicewire serve` of the checkout
# TREE (a `git worktree` of the build; `.` for this one) and its benches, one server after another,
# through scripts/bench_gpu.sh. Compare only within one call: lent machines of one kind differ by
# 15-20%, and a fresh machine's first server ran a third slower than the next ones (docs/benchmarks.md),
# so put a warm-up build first or repeat the first.
# Usage: scripts/ab_servers.sh OUT_DIR TAG=TREE[:PROFILE] [TAG=TREE[:PROFILE] ...]
#   PROFILE: that server's profile (a path from TREE, or absolute) in place of CONFIG, so that
#   one build's settings are compared on one machine (e.g. fifo=.:/tmp/fifo.yaml, a copy of
#   configs/gpu.yaml with server.codec_horizon_s: 0).
#   writes OUT_DIR/TAG.json, .md, .serve.log and .metrics.txt for each, as bench_gpu.sh does,
#   TAG.machine.json (the machine's speed just before that server: bench/machine.py),
#   OUT_DIR/comparison.md: the builds side by side (scripts/compare_bench.py), and
#   OUT_DIR/machine.end.json (its speed after the last).
# Settings from the environment:
#   SIZE (0.6b), LEVELS (256), and bench_gpu.sh's own (RATE, SESSIONS, CANCEL_EVERY, FRAMES, CONFIG,
#   WORKERS); the default is `busy`: RATE=0 SESSIONS=10 CANCEL_EVERY=0.
#   BENCHES: more benches on each server, one "NAME: BENCH ARGS" a line, passed to bench_gpu.sh
#   (e.g. "c1: --streams 1 --text-rate 0 --sessions-per-stream 5 --cancel-every 0"); written to
#   OUT_DIR/TAG.NAME.json and .md, and not in comparison.md.
#   SERVER_S (600): the most seconds one server may take, start and benches together.
#   INDUCTOR_CACHE: a .tar.gz of Inductor's and Triton's caches. Unpacked first where it exists and
#   written after the runs: a machine that starts bare compiles the fused kernels again otherwise
#   (on a lent H100 the engine was ready 149 s after loading with the cache, 271 s without). It is
#   kept in parts of 15 MiB (FILE.part-aa, -ab, ...), as a device call brings back files of at most
#   16 MiB; parts are read where the whole file is not there.
# The packages are each tree's folders, linked as `voicewire.*` (as scripts/offline_wheels.sh's
# header does); PYTHONPATH's other entries (the offline wheels) stay.
set -euo pipefail
out=${1:?output folder}
shift
# Every build checked before any server starts: a fresh GPU machine spends minutes on the first
# server, and a tree that cannot serve (a copy without web/, a profile's typo) failed only once
# its engine was up (session 66). Tags name the output files, so each is used once.
parse() {  # parse SPEC: sets tag, place (the tree) and profile from TAG=TREE[:PROFILE]
  tag=${1%%=*}
  place=${1#*=}
  profile=
  if [[ $place == *:* ]]; then
    profile=${place#*:}
    place=${place%%:*}
  fi
}
tags=" "
for spec in "$@"; do
  parse "$spec"
  if [[ $spec != *=* || -z $tag || $tags == *" $tag "* ]]; then
    echo "ab_servers: '$spec' is not TAG=TREE[:PROFILE] with a tag of its own" >&2
    exit 2
  fi
  tags+="$tag "
  for need in engine server client bench integrations web scripts/bench_gpu.sh; do
    if [ ! -e "$place/$need" ]; then
      echo "ab_servers: $tag's tree '$place' has no $need (a checkout or \`git worktree\` of a build)" >&2
      exit 2
    fi
  done
  # A relative profile is read from the tree, as the server runs there.
  file=$profile
  [[ -n $profile && $profile != /* ]] && file=$place/$profile
  if [ -n "$profile" ] && [ ! -f "$file" ]; then
    echo "ab_servers: $tag's profile '$profile' is not a file (from '$place')" >&2
    exit 2
  fi
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$PWD
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/voicewire-inductor}
export TRITON_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR/triton
cache=${INDUCTOR_CACHE:-}
if [ -n "$cache" ] && { [ -f "$cache" ] || compgen -G "$cache.part-*" >/dev/null; }; then
  mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
  if [ -f "$cache" ]; then tar xzf "$cache" -C "$TORCHINDUCTOR_CACHE_DIR"; else cat "$cache".part-* | tar xz -C "$TORCHINDUCTOR_CACHE_DIR"; fi
  echo "inductor cache: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1) from $cache"
fi
base_path=${PYTHONPATH:-}
# The machine's speed now (bench/machine.py), into FILE: where two servers differ, whether the
# machine did too (a lent H100 ran a build at 1,226 audio-s/s and, an hour later, at 747). This
# checkout's probe, run as a file (it imports only torch), so a build from before it has one too.
probe() {
  python3 "$root/bench/machine.py" | tee "$1" || echo "the machine probe failed: $1"
}
for spec in "$@"; do
  parse "$spec"
  tree=$(cd "$place" && pwd)
  links=$(mktemp -d)
  mkdir -p "$links/voicewire"
  for package in engine server client bench integrations; do
    ln -s "$tree/$package" "$links/voicewire/$package"
  done
  probe "$out/$tag.machine.json"
  started=$(date +%s)
  benches=()
  [ -n "${BENCHES:-}" ] && mapfile -t benches <<<"$BENCHES"
  (
    cd "$tree"
    export PYTHONPATH=$links${base_path:+:$base_path}
    [ -n "$profile" ] && export CONFIG=$profile
    RATE=${RATE:-0} SESSIONS=${SESSIONS:-10} CANCEL_EVERY=${CANCEL_EVERY:-0} \
      timeout "${SERVER_S:-600}" bash scripts/bench_gpu.sh "${SIZE:-0.6b}" "${LEVELS:-256}" "$out/$tag" \
      ${benches[@]+"${benches[@]}"}
  ) || echo "$tag: failed or cut short (exit $?)"
  echo "$tag ($(git -C "$tree" rev-parse --short HEAD)): $(($(date +%s) - started)) s, server and benches"
  rm -rf "$links"
done
tables=()
for spec in "$@"; do
  [ -f "$out/${spec%%=*}.json" ] && tables+=("${spec%%=*}=$out/${spec%%=*}.json")
done
[ ${#tables[@]} -gt 0 ] && python3 "$root/scripts/compare_bench.py" "${tables[@]}" | tee "$out/comparison.md"
probe "$out/machine.end.json"
if [ -n "$cache" ]; then
  rm -f "$cache" "$cache".part-*
  tar cz -C "$TORCHINDUCTOR_CACHE_DIR" . | split -b 15M -a 2 - "$cache.part-"
  echo "inductor cache written: $cache.part-* ($(cat "$cache".part-* | wc -c) bytes)"
fi
