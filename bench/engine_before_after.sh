#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The engine's figures before and after a change, side by side in one
# sitting: bench_pipeline of two builds, alternating, ROUNDS rounds each
# (each round a median of 5 runs), then text_throughput.py against each
# build. Prints every round; docs/BENCHMARKS.md takes the medians.
#
# usage: bench/engine_before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [DOCS]
#   defaults: 3 rounds, 200000 documents
# A build of another commit: git worktree add /tmp/before COMMIT, then
# cmake -S /tmp/before -B /tmp/before/build && cmake --build /tmp/before/build
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=${1:?usage: engine_before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [DOCS]}
after=${2:?usage: engine_before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [DOCS]}
rounds=${3:-3}
docs=${4:-200000}

for b in "$before" "$after"; do
  [ -x "$b/bench/bench_pipeline" ] || {
    echo "engine_before_after: no $b/bench/bench_pipeline; build it first" >&2
    exit 1
  }
done

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for b in "$before" "$after"; do
    echo "== round $r: $b"
    "$b/bench/bench_pipeline" 2000000 5
  done
done
# this build's script, so that both builds are measured the same way
for b in "$before" "$after"; do
  echo "== text: $b"
  /usr/bin/python3 "$here/text_throughput.py" --build "$b" --docs "$docs" \
    --reps 3 --futex
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
