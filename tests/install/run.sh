#!/usr/bin/env bash
# Installs the built project into a temporary prefix, builds tests/install against it, runs it.
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer" "$work/out"
ls "$work/prefix/include/xdl_trace/tracer.h" "$work/out/train.trace.0.1" "$work/out/train.trace.0.1.meta"
