#!/usr/bin/env bash
# Builds the libFuzzer targets with Debian's clang-14 (ASan + UBSan) in build-fuzz/ and runs
# each for FUZZ_SECONDS (default 30) from its corpus in fuzz/corpus/ (new inputs go to a
# scratch copy, the repository is not touched). Exit non-zero on the first finding; the input
# is left in build-fuzz/findings/. See fuzz/CMakeLists.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"
targets=(${FUZZ_TARGETS:-fuzz_config fuzz_schedule fuzz_hf_config})
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
      -DCMAKE_CXX_FLAGS="$flags" -DDYNATRAIN_WITH_TORCH=OFF -DDYNATRAIN_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
mkdir -p build-fuzz/findings
status=0
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/${t#fuzz_}"
  work="build-fuzz/corpus-${t#fuzz_}"
  mkdir -p "$work"
  cp -n "$corpus"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $t for ${seconds} s (corpus $corpus)"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "build-fuzz/fuzz/$t" \
       -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="build-fuzz/findings/$t-" -print_final_stats=1 "$work" 2>build-fuzz/$t.log; then
    echo "fuzz: $t FOUND a failing input (build-fuzz/findings/$t-*):"; grep -E "ERROR|exception|SUMMARY|what\(\)" build-fuzz/$t.log | head -5
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" build-fuzz/$t.log | sed "s/^/  /"
  fi
done
exit $status
