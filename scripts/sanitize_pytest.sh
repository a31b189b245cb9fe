#!/usr/bin/env bash
# Runs pytest against the ASan/UBSan-built extension: usage sanitize_pytest.sh <asan build dir> [pytest args].
# The interpreter is not instrumented, so libasan is preloaded; the tests run on a copy of the
# checkout (tracked and new files) whose package holds the ASan _core, so every path the tests
# derive from their own location, subprocesses included, uses that extension.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(cd "$1" && pwd)
shift
python=${PYTHON:-/usr/bin/python3}

shopt -s nullglob
ext=("$build_dir"/python/_core*.so)
if [ ${#ext[@]} -ne 1 ]; then
  echo "sanitize_pytest: expected one _core*.so in $build_dir/python (build the _core target)" >&2
  exit 1
fi

tree="$build_dir/pytree"
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -co --exclude-standard -z |
  while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$tree"
rm -f "$tree"/xdl_trace/_core*.so
cp "${ext[0]}" "$tree/xdl_trace/"
# The generated protobuf modules and read_trace.py's descriptor set are build outputs (git-ignored), placed beside _core.
cp "$build_dir"/python/_proto/*_pb2.py "$tree/xdl_trace/_proto/"
cp "$build_dir"/python/tools/*.protoset "$tree/xdl_trace/tools/"

libasan=$(${CC:-gcc} -print-file-name=libasan.so)
[ -f "$libasan" ] || { echo "sanitize_pytest: libasan not found ($libasan)" >&2; exit 1; }
# Leaks are not checked: the interpreter and numpy hold memory until exit by design.
# libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw
# interceptor must find it at start-up ("real___cxa_throw != 0" check failure otherwise).
libstdcxx=$(${CXX:-g++} -print-file-name=libstdc++.so)
export LD_PRELOAD="$libasan:$libstdcxx${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# -P: the current directory is not put on sys.path (the copy's conftest puts the copy there).
# --capture=sys: sanitizer reports, written to fd 2, reach the terminal even when the process
# aborts (fd-level capture would take them down with it). test_pip_install is left out: it
# compiles the package again with pip (uninstrumented, and slow with libasan preloaded).
cd "$tree"
exec "$python" -P -m pytest -p no:cacheprovider --capture=sys \
  --ignore=tests/python/test_pip_install.py tests/python "$@"
