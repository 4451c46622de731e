#!/usr/bin/env bash
# Formats the tracked C++ and CUDA sources with .clang-format (clang-format-14, Debian's
# clang-format-14 package). --check: changes nothing, lists the files that would change and
# exits 1 when there is one.
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $fmt ]] || { echo "format: clang-format-14 not found (apt-get install -y clang-format-14)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  bad=0
  for f in "${files[@]}"; do
    "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || { echo "$f"; bad=1; }
  done
  exit "$bad"
fi
"$fmt" -i "${files[@]}"
