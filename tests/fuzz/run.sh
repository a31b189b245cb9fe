#!/usr/bin/env bash
# Runs every fuzzer of tests/fuzz for a fixed time: usage run.sh <fuzz build dir> <seconds>.
# The fuzzers run side by side, each for <seconds>, starting from the committed seeds, the
# regression corpus and what earlier runs found (<build>/corpus); a crash fails the run and
# leaves its input in <build>/crashes/<fuzzer>/.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "$1" && pwd)
seconds=$2
fuzzers=(reader meta)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

pids=()
for f in "${fuzzers[@]}"; do
  mkdir -p "$build/corpus/$f" "$build/crashes/$f"
  "$build/tests/fuzz/${f}_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$build/crashes/$f/" \
    "$build/corpus/$f" "tests/fuzz/corpus/$f" "tests/fuzz/regressions/$f" \
    >"$build/$f.log" 2>&1 &
  pids+=($!)
done

status=0
for i in "${!fuzzers[@]}"; do
  f=${fuzzers[$i]}
  if wait "${pids[$i]}"; then
    echo "fuzz $f: $(grep -E '^stat::number_of_executed_units' "$build/$f.log" | awk '{print $2}') runs, no crash ($build/$f.log)"
  else
    status=1
    echo "fuzz $f: FAILED; log $build/$f.log, inputs in $build/crashes/$f/:" >&2
    ls "$build/crashes/$f/" >&2
    grep -E 'ERROR|runtime error|invariant broken|SUMMARY' "$build/$f.log" | head -5 >&2
    echo "Keep a crash as a regression test: copy it to tests/fuzz/regressions/$f/ once fixed" \
         "(tests/fuzz/pending/$f/ until then)." >&2
  fi
done
exit $status
