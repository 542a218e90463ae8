#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds echoflow three ways and runs the whole test suite in each: the
# developer build (warnings are errors), ASan+UBSan, and TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

run_suite() {
  local dir=$1; shift
  echo "== $dir: $*"
  cmake -S . -B "$dir" -DEF_DEV=ON -DEF_BUILD_TESTS=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j "$jobs")
}

run_suite build
# halt_on_error keeps the first report readable; detect_leaks is LSan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DEF_SANITIZE=address,undefined
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  run_suite build-tsan -DCMAKE_BUILD_TYPE=Debug -DEF_SANITIZE=thread
echo "all three builds passed"
