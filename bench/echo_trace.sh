#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Automatic echoing following R while it changes: a picture for
# docs/echoing.md, drawn from `echoflow run --stats-every` alone.
#
# Fashion-MNIST images resized to 112x112, randomly cropped to 32x32 and
# flipped on one core (taskset -c 0) feed `echo:factor=auto,max=8 | batch:32`, and a
# training step of --consume-us per batch asks for about twice what that
# core makes (R of about 2). Six seconds in, two busy loops start on the same core, as
# neighbours taking it would, leaving the upstream about a third of it;
# six seconds later they stop. The trace shows the R the echo stage
# measures and the factor it echoes at, every quarter second.
#
# usage: bench/echo_trace.sh [BUILD_DIR] [PNG]
#   defaults: build/ and docs/img/echo_trace.png (needs gnuplot-nox)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
png=${2:-$root/docs/img/echo_trace.png}
fm=/usr/share/datasets/fashion-mnist
py=/usr/bin/python3
step_us=780    # one batch of 32 per step: 41,000 images/s asked for
phase_s=6      # before, during and after the busy loop
batches=$((3 * phase_s * 1000000 / step_us))

tmp=$(mktemp -d)
hogs=
cleanup() {
    [ -z "$hogs" ] || kill $hogs 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

spec="idx:images=$fm/train-images-idx3-ubyte.gz,labels=$fm/train-labels-idx1-ubyte.gz"
spec="$spec | repeat | resize:112 | random_resized_crop:size=32 | flip"
spec="$spec | prefetch:256 | echo:factor=auto,max=8 | batch:32 | take:$batches"
taskset -c 0 "$build/echoflow" run --json --stats-every 0.25 \
    --consume-us "$step_us" "$spec" >"$tmp/trace.jsonl" &
run=$!
# the clock starts once the stages are open (the IDX files are read)
until [ -s "$tmp/trace.jsonl" ]; do sleep 0.05; done
t_on=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["t"])' "$tmp/trace.jsonl")
sleep "$phase_s"
for _ in 1 2; do
    taskset -c 0 sh -c 'while :; do :; done' &
    hogs="$hogs $!"
done
sleep "$phase_s"
# shellcheck disable=SC2086
kill $hogs
hogs=
wait "$run"

# one row per stats line: t, R measured, the factor over the interval
"$py" - "$tmp/trace.jsonl" "$tmp/trace.dat" "$t_on" "$phase_s" <<'PYEOF'
import json, sys
src, dst, t_on, phase = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
lines = [json.loads(l) for l in open(src)]
ticks, report = lines[:-1], lines[-1]
prev = None
with open(dst, "w") as out:
    for d in ticks:
        e = next(s for s in d["stages"] if s["name"] == "echo")
        if "fresh" not in e:
            continue  # the stages are not open yet
        if prev and e["fresh"] > prev["fresh"] and "r_estimate" in e:
            df = e["fresh"] - prev["fresh"]
            factor = (df + e["echoed"] - prev["echoed"]) / df
            out.write("%.3f %.3f %.3f\n" % (d["t"] - t_on, e["r_estimate"], factor))
        prev = e
echo = next(s for s in report["stages"] if s["name"] == "echo")
print("busy loops from %.2f s to %.2f s (after the first stats line)" % (phase, 2 * phase))
print("run: %d batches in %.1f s, consumer waited %.1f%%, effective factor %.2f"
      % (report["items"], report["elapsed_s"], 100 * report["consumer_wait_fraction"],
         echo["effective_factor"]))
PYEOF

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
gnuplot <<GPEOF
set terminal pngcairo size 900,420 font ",11"
set output "$png"
set title "echo:factor=auto,max=8 following R (echoflow $commit)"
set xlabel "seconds"
set ylabel "R measured, echo factor"
set yrange [0:*]
set key top left
set grid
set object 1 rect from $phase_s, graph 0 to $((2 * phase_s)), graph 1 behind fillcolor rgb "#e8e8e8" fillstyle solid 1.0 noborder
set label 1 "two busy loops share the upstream's core" at $phase_s + 0.2, graph 0.06
plot "$tmp/trace.dat" using 1:2 with lines lw 2 title "R the echo stage measures", \
     "" using 1:3 with lines lw 2 title "echo factor over each 0.25 s"
GPEOF
echo "wrote $png"
