#!/usr/bin/env bash
# Sanitizer builds of the core, without the libtorch trainer (DYNATRAIN_WITH_TORCH=OFF):
#   asan  build-asan/: vps, plan, exec, comm, testing, tools, ckpt under AddressSanitizer +
#         UndefinedBehaviorSanitizer (any report fails: -fno-sanitize-recover, halt_on_error),
#         their unit tests, the in-process transition and transport tests, and the MPI ones
#         under mpirun -np 2 and 4. Open MPI's own leaks are suppressed (scripts/lsan-openmpi.supp).
#   tsan  build-tsan/: the in-process transport and transition tests under ThreadSanitizer
#         (ranks are threads there, so races between ranks would show).
# Usage: scripts/sanitize.sh [asan|tsan|all]   (default all). Exit non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi-env.sh
mode="${1:-all}"
jobs=$(nproc)
root=$(pwd)

configure() {  # configure DIR FLAGS: -O1 -g1 (line tables for reports) keeps the build short
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Sanitize -DDYNATRAIN_WITH_TORCH=OFF \
        -DCMAKE_CXX_FLAGS="$2 -O1 -g1 -fno-omit-frame-pointer" >/dev/null
}

asan() {
  configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  cmake --build build-asan -j"$jobs" --target test_vps test_plan test_input_bounds test_exec_unit test_exec_inproc \
        inproc_transport_test mpi_transport_test test_exec_mpi test_ckpt
  # Full stacks (Open MPI is built without frame pointers) and its plugins kept loaded, so the
  # suppressions can match Open MPI's own leaks by library name.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$root/scripts/lsan-openmpi.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  local b=build-asan/tests
  for t in "$b/test_vps" "$b/plan/test_plan" "$b/reliability/test_input_bounds" "$b/exec/test_exec_unit" "$b/comm/inproc_transport_test" \
           "$b/exec/test_exec_inproc" "$b/ckpt/test_ckpt"; do
    echo "asan: $t"
    "$t" --gtest_brief=1
  done
  for np in 2 4; do
    echo "asan: mpirun -np $np mpi_transport_test, test_exec_mpi"
    mpirun -np "$np" "$b/comm/mpi_transport_test" --gtest_brief=1
    mpirun -np "$np" "$b/exec/test_exec_mpi" >/dev/null
  done
  echo "asan: no reports"
}

tsan() {
  configure build-tsan "-fsanitize=thread"
  cmake --build build-tsan -j"$jobs" --target inproc_transport_test test_exec_inproc
  export TSAN_OPTIONS="halt_on_error=1:exitcode=87"
  echo "tsan: inproc_transport_test"
  build-tsan/tests/comm/inproc_transport_test --gtest_brief=1
  echo "tsan: test_exec_inproc"
  build-tsan/tests/exec/test_exec_inproc --gtest_brief=1
  echo "tsan: no reports"
}

case "$mode" in
  asan) asan ;;
  tsan) tsan ;;
  all) asan; tsan ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
