#!/usr/bin/env bash
# Installs the built project into a temporary prefix, builds tests/install against it, runs it
# (with the CUPTI tracer, found by name in the prefix, where the build made the plugin).
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --build "$build_dir" --target xdl_trace_shared xdl_trace_tf_c >/dev/null
if [[ -e "$build_dir/plugins/libxdl_trace_cupti.so" ]] || grep -q '^XDL_TRACE_CUPTI_INCLUDE_DIR:PATH=/' "$build_dir/CMakeCache.txt"; then
  cmake --build "$build_dir" --target xdl_trace_cupti >/dev/null
fi
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
ls "$work/prefix/include/xdl_trace/tracer.h" "$work/prefix/include/xdl_trace/version.h"
# TensorFlow's status functions for TensorFlow profiler plugins, beside the plugins.
ls "$work/prefix/lib/xdl_trace/plugins/libxdl_trace_tf_c.so"
# Test support never ships: the plugins folder holds the product plugins only (no synthetic GPU).
for shipped in "$work/prefix/lib/xdl_trace/plugins"/*; do
  case "$(basename "$shipped")" in
    libxdl_trace_tf_c.so | libxdl_trace_cupti.so) ;;
    *) echo "the install ships $shipped, which is not a product plugin" >&2; exit 1 ;;
  esac
done
plugin="$work/prefix/lib/xdl_trace/plugins/libxdl_trace_cupti.so"
if [[ -e "$plugin" ]]; then
  # Nothing points into the build tree: the library finds the plugin beside itself.
  env -u XDL_TRACE_PLUGIN_PATH "$work/build/consumer" "$work/out" cupti
else
  echo "SKIPPED cupti part: the build made no CUPTI plugin (no CUDA toolkit headers)"
  "$work/build/consumer" "$work/out"
fi
ls "$work/out/train.trace.0.1" "$work/out/train.trace.0.1.meta"
