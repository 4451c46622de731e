#!/usr/bin/env bash
# One short check of the CUDA parts on a machine with a GPU (well under 5 minutes on 16 cores):
#   1. configures build-gpu/ (Release, CUDA required, no libtorch) and builds only what it runs;
#   2. runs the device tests: test_box_index (host), test_exec_cuda, nccl_transport_test and
#      test_exec_nccl (the engine on device state over NCCL; 1 process each); with a device
#      present none of them may skip (but the generic comm cases NCCL cannot meet);
#   3. runs bench_gpu_switch: a 2 GiB switch between 2 processes sharing GPU 0 (CUDA IPC) and the
#      device-to-device copy bound of the same bytes in the same run, printing switch / copy_bound;
#   4. writes the results to $OUT/gpu_check.md when OUT is set, else bench/results/gpu_check.md
#      (step logs beside it in $OUT when set).
# Any failure: one line `gpu-check: error: ...` on stderr, non-zero exit. The whole run is under
# a `timeout` guard (GPU_CHECK_TIMEOUT seconds, default 290).
# Usage: OUT=/some/dir ./scripts/gpu-check.sh [--allow-no-gpu]
#   --allow-no-gpu  without a CUDA device: build, run the tests (they skip), exit 0 after
#                   saying so (the rehearsal for machines without a GPU). Without the flag no
#                   device is an error.
# Environment: JOBS (build jobs, default 16), GPU_CHECK_BUILD (build dir, default build-gpu),
#              GPU_CHECK_GIB (switched state in GiB, default 2), GPU_CHECK_TIMEOUT.
set -uo pipefail

limit=${GPU_CHECK_TIMEOUT:-290}
if [[ -z "${GPU_CHECK_GUARDED:-}" ]]; then
  GPU_CHECK_GUARDED=1 timeout --kill-after=10 "$limit" "$0" "$@"
  rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "gpu-check: error: did not finish within ${limit} s (GPU_CHECK_TIMEOUT)" >&2
  fi
  exit $rc
fi

cd "$(dirname "$0")/.." || exit 1
allow_no_gpu=0
for a in "$@"; do
  case "$a" in
    --allow-no-gpu) allow_no_gpu=1 ;;
    *) echo "gpu-check: error: unknown argument $a; valid: --allow-no-gpu" >&2; exit 2 ;;
  esac
done
build=${GPU_CHECK_BUILD:-build-gpu}
jobs=${JOBS:-16}
gib=${GPU_CHECK_GIB:-2}
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT" || exit 1
  logs=$OUT results=$OUT/gpu_check.md
else
  logs=$(mktemp -d) results=bench/results/gpu_check.md
fi

fail() { echo "gpu-check: error: $*" >&2; exit 1; }
# step NAME CMD...: runs CMD with its output in $logs/NAME.log; on failure one line naming the
# step, the log and its last line.
timings=""
step() {
  local name=$1 t0=$SECONDS
  shift
  if ! "$@" >"$logs/$name.log" 2>&1; then
    fail "$name failed ($logs/$name.log): $(grep -v '^\s*$' "$logs/$name.log" | tail -n 1)"
  fi
  timings+="${timings:+, }$name $((SECONDS - t0)) s"
}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDYNATRAIN_WITH_CUDA=ON \
  -DDYNATRAIN_WITH_TORCH=OFF "${launcher[@]}"
grep -q "comm/nccl are built" "$logs/configure.log" || fail "configure found no NCCL ($logs/configure.log)"
step build cmake --build "$build" -j "$jobs" --target test_box_index test_exec_cuda nccl_transport_test test_exec_nccl bench_gpu_switch

devices=$("$build/bench_gpu_switch" --device-count 2>"$logs/devices.log") || fail "device query failed ($logs/devices.log)"
source scripts/mpi-env.sh
step test_box_index "$build/tests/exec/test_box_index" --gtest_color=no
step test_exec_cuda "$build/tests/exec/test_exec_cuda" --gtest_color=no
step nccl_transport_test timeout 120 mpirun -np 1 "$build/tests/comm/nccl_transport_test" --gtest_color=no
step test_exec_nccl timeout 120 mpirun -np 1 "$build/tests/exec/test_exec_nccl" --gtest_color=no

if [[ "$devices" -eq 0 ]]; then
  [[ $allow_no_gpu -eq 1 ]] || fail "no CUDA device visible (driver or GPU missing); --allow-no-gpu rehearses the build and skip paths"
  echo "gpu-check: no CUDA device: built, device tests skipped (logs in $logs), switch not run ($timings)"
  exit 0
fi
# With a device, a skipped device test is a failure (only the cases NCCL cannot meet may skip).
! grep -q "SKIPPED \]" "$logs/test_exec_cuda.log" ||
  fail "test_exec_cuda skipped tests on a machine with $devices devices ($logs/test_exec_cuda.log)"
grep -q "OK \] NcclDevice.XorExchangeAndAllReduceOnDeviceBuffers" "$logs/nccl_transport_test.log" ||
  fail "nccl_transport_test did not run its device tests ($logs/nccl_transport_test.log)"
! grep -q "SKIPPED \]" "$logs/test_exec_nccl.log" ||
  fail "test_exec_nccl skipped the engine on the device ($logs/test_exec_nccl.log)"

step switch timeout 120 mpirun -np 2 "$build/bench_gpu_switch" --gib "$gib" --repeat 5 --out "$results"
printf '\nSteps of this run (%s cores): %s; %s s in all.\n' "$(nproc)" "$timings" "$SECONDS" >>"$results"
echo "gpu-check: ok: $(grep -h "switch / copy_bound" "$logs/switch.log"); results in $results (${SECONDS} s)"
