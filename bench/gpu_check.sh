#!/usr/bin/env bash
# The GPU machine's one prepared script: build there, run the GPU tests (issue 36's device-safety
# tests on CUDA first), then the summary and digest passes' GPU time (bench/device_summary.py)
# and bench/gpu.py (issue 19's figures, issue 33's marks), and GPU_DIR's cupti_stall.py and
# cupti_cost.py (issue 20's).
#   bash bench/gpu_check.sh GPU_DIR OUT     (GPU_DIR: a git-ignored copy of ../shared/gpu holding
#                                           pfx/ from prepare_prefix.sh; OUT: where figures go)
# Prints each part's outcome and the seconds since the start (the device call's limit is 600 s;
# each part has a bound of its own, exit 124 past it, so a hang leaves the later parts time);
# the figures land in OUT/{gpu,cupti_stall,cupti_cost}.json and OUT/*.log as each part ends.
set -u
gpu=$(cd "${1:?GPU_DIR}" && pwd); out=$(mkdir -p "${2:?OUT}" && cd "$2" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
bash "$gpu/build_on_gpu_machine.sh" "$src" "$gpu/pfx" /tmp/xdl-gpu-build > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=$gpu/pfx/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$src
said() { echo "$1: exit $2 after ${SECONDS}s ($3)"; }
(cd /tmp/xdl-gpu-build && timeout -k 5 150 ctest -L gpu --output-on-failure) > "$out/ctest_gpu.log" 2>&1
said "ctest -L gpu" $? "$(grep -E 'tests passed|tests failed' "$out/ctest_gpu.log")"
timeout -k 5 300 python3 -m pytest -m gpu -q -rs tests/python/test_device_safety.py \
  tests/python/test_device_capture.py tests/python/test_fused_digest.py tests/python/test_torch.py \
  tests/python/test_gpu_memory.py \
  > "$out/pytest_gpu.log" 2>&1
said "pytest -m gpu" $? "$(tail -1 "$out/pytest_gpu.log")"
timeout -k 5 90 python3 bench/device_summary.py --device cuda > "$out/device_summary.log" 2>&1
said "bench/device_summary.py" $? "$(grep -c 'on the GPU' "$out/device_summary.log") passes timed"
timeout -k 5 200 python3 bench/gpu.py --json "$out/gpu.json" 2>&1 | tee "$out/bench_gpu.log"
said "bench/gpu.py" "${PIPESTATUS[0]}" "$out/gpu.json"
python3 "$gpu/bench/cupti_stall.py" "$out/cupti_stall.json" > "$out/cupti_stall.log" 2>&1
said "cupti_stall.py" $? "$(tail -1 "$out/cupti_stall.log")"
python3 "$gpu/bench/cupti_cost.py" "$out/cupti_cost.json" > "$out/cupti_cost.log" 2>&1
said "cupti_cost.py" $? "$(tail -1 "$out/cupti_cost.log")"
