#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), then configures and builds DynaTrain in build/.
# Safe to re-run: apt is skipped when every package is present, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake git libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libtorch-dev libopenblas0-pthread gnuplot-nox
          libgloo-dev libxxhash-dev pybind11-dev python3-dev python3-torch python3-mpi4py python3-numpy python3-pytest
          clang-14 libclang-rt-14-dev
          iproute2)  # iproute2: ip netns / tc for the two-node rehearsal (scripts/netns-*.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
