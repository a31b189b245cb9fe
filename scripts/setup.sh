#!/usr/bin/env bash
# Installs, from Debian's packages, whatever the build, tests, demo and benchmarks need; idempotent.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libprotobuf-dev protobuf-compiler libabsl-dev pybind11-dev catch2
  python3-dev python3-numpy python3-protobuf python3-pytest python3-torch
  python3-setuptools python3-wheel python3-venv python3-pip
  libopenblas0-pthread clang-format black
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
