#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sweeps R = t_up / t_down and reports what echoing does at each:
#   bench/auto_echo_sweep.sh [build/echoflow]
# The upstream is `range | throttle:rate=20000` (one item every 50 us);
# the consumer sleeps --consume-us per batch of 32, chosen so that
# R = 32 * 50 us / consume_us. For each R: echo:auto,max=8 before batch
# (example echoing) and after it (batch echoing), and a fixed echo:4 before
# batch for comparison (behind a prefetch, so that the upstream overlaps
# with the consumer as it does in auto mode), and auto before batch with a
# prefetch between batch and the consumer (where the echo stage sees the
# consumer's waiting only through the pipeline's counter). Columns: the
# effective echo factor, the fraction of time the consumer waited, fresh
# items/s against the throttle's 20000/s, and the echo stage's own
# estimate of R.
set -euo pipefail
bin=${1:-build/echoflow}
rate=20000
n=60000
for R in 0.5 1 2 4 8 16; do
  us=$(awk -v r="$R" 'BEGIN { printf "%d", 32 * 50 / r }')
  for variant in "auto-example" "auto-batch" "fixed4-example" "auto-prefetch"; do
    case $variant in
      auto-example)   spec="range:n=$n | throttle:rate=$rate | echo:factor=auto,max=8 | batch:32" ;;
      auto-batch)     spec="range:n=$n | throttle:rate=$rate | batch:32 | echo:factor=auto,max=8" ;;
      fixed4-example) spec="range:n=$n | throttle:rate=$rate | prefetch:64 | echo:4 | batch:32" ;;
      auto-prefetch)  spec="range:n=$n | throttle:rate=$rate | echo:factor=auto,max=8 | batch:32 | prefetch:4" ;;
    esac
    printf '%s %s %s ' "$R" "$variant" "$us"
    "$bin" run --json --consume-us "$us" "$spec"
  done
done | /usr/bin/python3 -c '
import json, sys
rate = 20000
print("%5s %-15s %9s %9s %10s %14s %8s %8s" % ("R", "echo", "step us", "factor",
      "wait", "fresh/s", "fresh %", "R est."))
for line in sys.stdin:
    R, variant, us, js = line.split(" ", 3)
    r = json.loads(js)
    e = next(s for s in r["stages"] if s["name"] == "echo")
    # fresh items/s in the units of the throttle (examples)
    per = 32 if variant == "auto-batch" else 1
    fresh = e["fresh"] * per / r["elapsed_s"]
    print("%5s %-15s %9s %9.2f %9.1f%% %14.0f %7.1f%% %8.2f" % (R, variant, us,
          e["effective_factor"], 100 * r["consumer_wait_fraction"], fresh,
          100 * fresh / rate, e["r_estimate"]))
'
