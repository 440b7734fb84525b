#!/usr/bin/env bash
# The GPU-only tests (tests that skip themselves without CUDA, and the Triton kernels' tests,
# compiled instead of interpreted) on a CUDA host, in two pytest processes at once: most of their
# time is compiling kernels, one core each. On a lent H200 one process took 450-510 s for the 137
# tests, two at once 426 s (docs/benchmarks.md, "Reproducing").
# Usage: scripts/gpu_tests.sh [OUT_DIR]   (writes OUT_DIR/gpu_tests_1.txt and _2.txt; default /tmp)
# Exits 0 only when both processes passed and every kernel test file ran. Run from the repo root
# (after `source scripts/device_env.sh` on a host without internet).
set -u
out=${1:-/tmp}
k=tests/engine/kernels
first=($k/test_fused_conv.py $k/test_fused_snake.py $k/test_decoder_window.py $k/test_triton_kernels.py
  $k/test_pdl.py $k/test_pointwise.py $k/test_choice.py)
second=($k/test_fused_layer.py $k/test_fused_draw.py $k/test_cuda_graphs.py
  tests/engine/runtime/test_decoder_batch.py tests/engine/runtime/test_frame_step.py tests/bench/test_machine.py)
status=0
for f in $k/test_*.py; do
  case " ${first[*]} ${second[*]} " in
    *" $f "*) ;;
    *) echo "not in either list: $f (add it to scripts/gpu_tests.sh)"; status=1 ;;
  esac
done
python3 -m pytest -q -p no:cacheprovider -rf --tb=short "${first[@]}" > "$out/gpu_tests_1.txt" 2>&1 &
one=$!
python3 -m pytest -q -p no:cacheprovider -rf --tb=short "${second[@]}" > "$out/gpu_tests_2.txt" 2>&1 &
two=$!
wait $one || status=1
wait $two || status=1
for f in "$out/gpu_tests_1.txt" "$out/gpu_tests_2.txt"; do
  echo "== $f"
  grep -E "^FAILED|^ERROR|passed|failed" "$f" | tail -8
done
exit $status
