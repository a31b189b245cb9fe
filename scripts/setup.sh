#!/usr/bin/env bash
# Installs, from Debian's packages, whatever the build, tests, demo and benchmarks need; idempotent.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libprotobuf-dev protobuf-compiler libabsl-dev pybind11-dev catch2
  python3-dev python3-numpy python3-protobuf python3-pytest python3-torch
  python3-setuptools python3-wheel python3-venv python3-pip
  python3-matplotlib python3-dask python3-distributed python3-pandas python3-tqdm chromium
  chromium-driver python3-selenium  # the report tests drive a real Chromium (browser.py)
  libopenblas0-pthread clang-format black
  python3-h5py  # bench/overhead.py's h5py peer (a per-step append, as users write)
  clang-14 libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes (make fuzz, make sanitize)
)

# One dpkg-query for all packages keeps this instant when everything is present.
missing=()
installed="$({ dpkg-query -W -f='${binary:Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true; } |
  awk '$NF == "installed" && $(NF-1) == "ok" {sub(/:.*/, "", $1); print $1}')"
for p in "${packages[@]}"; do
  if ! grep -qx -- "$p" <<<"$installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
