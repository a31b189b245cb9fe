#!/usr/bin/env bash
# A/B benchmark of two revisions in one run: builds REV's extension in a worktree, then alternates
# bench/overhead.py and bench/read.py between REV and the working tree, ROUNDS times each.
#
#   bash bench/compare_revisions.sh REV [ROUNDS]      e.g. bash bench/compare_revisions.sh HEAD~5 3
#
# Alternating whole runs lets drift of this VM's speed hit both sides alike; compare the pairs.
# Prints figures only; nothing passes or fails.
set -euo pipefail
rev=${1:?usage: compare_revisions.sh REV [ROUNDS]}
rounds=${2:-3}
python=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")/.." && pwd)
base="$here/build/ab-$(git -C "$here" rev-parse --short "$rev")"
if [ ! -d "$base" ]; then
  git -C "$here" worktree add --detach "$base" "$rev" >/dev/null
fi
cmake -S "$base" -B "$base/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXDL_TRACE_BUILD_TESTS=OFF \
  -DXDL_TRACE_BUILD_EXAMPLES=OFF "-DPython_EXECUTABLE=$python" "-DPYTHON_EXECUTABLE=$python" >/dev/null
cmake --build "$base/build" -j "$(nproc)" --target _core >/dev/null
overhead_flags=${OVERHEAD_FLAGS:---frameworks numpy --rounds 10 --out-dir /dev/shm/xdl_ab}
read_flags=${READ_FLAGS:---mb 128}
for i in $(seq "$rounds"); do
  for side in "$base" "$here"; do
    label=$([ "$side" = "$here" ] && echo "working tree" || echo "$rev")
    echo "=== round $i: $label"
    # Each side runs its own overhead.py (flags and output changed over time): keep the
    # lines that carry ratios in either format.
    (cd "$side" && $python bench/overhead.py $overhead_flags | grep -E "ratio|per traced|^  xdl |floor")
    (cd "$side" && $python bench/read.py $read_flags | grep -E "MB/s|records,")
  done
done
