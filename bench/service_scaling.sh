#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The preprocessing service on this machine: W = 1, 2, 3 `echoflow serve`
# workers, each limited to RATE items/s (--throttle, a per-item cost that
# takes no CPU, so that on a small machine adding workers adds capacity,
# as adding machines would), feeding one trainer.
#
#   bench/service_scaling.sh [--quick] [path/to/echoflow]   (default build/echoflow)
#
# Fashion-MNIST is packed into 12 WebDataset shards (PNG) in a temporary
# folder; the workers run `tar | decode` on them, --splits 12.
#
# 1. Delivery: `echoflow run 'service | batch:128'` reads one epoch
#    (60,000 images); items/s against the ideal W x RATE.
# 2. Echo adaptation: `echoflow train` (the MLP, --threads 1) reads
#    `service:epochs=0 | shuffle:10000 | echo:factor=auto,max=8,shuffle=10000
#    | batch:128 | prefetch:4` to 87% test accuracy: the effective echo
#    factor and R the echo stage measured, fresh examples and training
#    time to the target, and the share of time the trainer waited.
#    Without echoing (echo:factor=1) for comparison.
# 3. Transport: `range:n=N,bytes=B | batch:128` read locally against
#    the same range run by one worker and read through `service |
#    batch:128`, for 784-byte (an MNIST image) and 150,528-byte (a
#    224x224x3 image) items: time per batch both ways, and the time the
#    trainer spent inside MPI receives and the worker inside MPI sends,
#    per batch (shared memory; the worker makes its items on another
#    core meanwhile, so the service may beat the local pipeline).
# Prints markdown tables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quick=0
[ "${1:-}" = "--quick" ] && { quick=1; shift; }
cli=${1:-$here/../build/echoflow}
[ -x "$cli" ] || { echo "service_scaling: build echoflow first ($cli)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "service_scaling: apt-get install openmpi-bin" >&2; exit 1; }
py=/usr/bin/python3
mpirun=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
fmnist=${EF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
rate=7000
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_service_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

idx="idx:images=$fmnist/train-images-idx3-ubyte.gz,labels=$fmnist/train-labels-idx1-ubyte.gz"
test="idx:images=$fmnist/t10k-images-idx3-ubyte.gz,labels=$fmnist/t10k-labels-idx1-ubyte.gz | batch:1000"
"$cli" pack "$idx" "$tmp/train-%06d.tar" --per-shard 5000 >/dev/null
serve=(serve "tar:urls=$tmp/train-{000000..000011}.tar | decode" --splits 12)

echo "commit $(git -C "$here" rev-parse --short HEAD), $(nproc) cores, $(date -u +%F)"
echo
echo "Delivery, one epoch of 60,000 images, workers at $rate items/s each:"
echo
echo "| workers | items/s | ideal | of ideal |"
echo "| ---: | ---: | ---: | ---: |"
for w in 1 2 3; do
    out=$("${mpirun[@]}" -np 1 "$cli" run 'service | batch:128' --json : \
        -np "$w" "$cli" "${serve[@]}" --throttle "$rate")
    echo "$out" | "$py" -c '
import json, sys
w, rate = int(sys.argv[1]), float(sys.argv[2])
d = json.loads(sys.stdin.readline())
fresh = d["stages"][0]["items_out"]
ips = fresh / d["elapsed_s"]
print("| %d | %.0f | %.0f | %.2f |" % (w, ips, w * rate, ips / (w * rate)))
' "$w" "$rate"
done

echo
echo "Training the MLP to 87% test accuracy (--threads 1, batch 128, evaluated every 20,000 fresh examples):"
echo
echo "| workers | echo | effective factor | R measured | fresh to target | time to target (s) | trainer waited |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
max_fresh=400000
[ "$quick" = 1 ] && max_fresh=100000
for w in 1 2 3; do
    for echo_opts in "factor=auto,max=8,shuffle=10000" "factor=1"; do
        spec="service:epochs=0 | shuffle:10000 | echo:$echo_opts | batch:128 | prefetch:4"
        out=$("${mpirun[@]}" -np 1 "$cli" train --spec "$spec" \
            --test-spec "$test" --target-acc 0.87 --max-fresh "$max_fresh" \
            --eval-every 20000 --threads 1 --json : \
            -np "$w" "$cli" "${serve[@]}" --throttle "$rate")
        echo "$out" | "$py" -c '
import json, sys
w, name = sys.argv[1], sys.argv[2]
d = json.loads(sys.stdin.readline())
e = d["echo"]
if not d["reached"]:
    print("| %s | %s | %.2f | %.1f | not reached | - | %.0f%% |" % (
        w, name, e["effective_factor"], e["r_estimate"],
        100 * d["consumer_wait_fraction"]))
else:
    print("| %s | %s | %.2f | %.1f | %d | %.1f | %.0f%% |" % (
        w, name, e["effective_factor"], e["r_estimate"],
        d["fresh_to_target"], d["time_to_target_s"],
        100 * d["consumer_wait_fraction"]))
' "$w" "${echo_opts%%,*}"
    done
done

echo
echo "Transport: a batch of 128 read locally and through the service (1 worker):"
echo
echo "| item bytes | local us/batch | service us/batch | receive us/batch | send us/batch | service MB/s |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for bytes in 784 150528; do
    n=$([ "$bytes" = 784 ] && echo 1280000 || echo 25600)
    [ "$quick" = 1 ] && n=$((n / 4))
    src="range:n=$n,bytes=$bytes"
    local_out=$("$cli" run "$src | batch:128" --json)
    svc_out=$("${mpirun[@]}" -np 1 "$cli" run "service | batch:128" --json : \
        -np 1 "$cli" serve "$src" --splits 4 --json)
    "$py" - "$bytes" "$n" "$local_out" "$svc_out" <<'PY'
import json, sys
nbytes, n = int(sys.argv[1]), int(sys.argv[2])
loc = json.loads(sys.argv[3])
lines = [json.loads(l) for l in sys.argv[4].splitlines()]
svc = [d for d in lines if "rank" not in d][0]
worker = [d for d in lines if "rank" in d][0]
batches = n / 128
service = svc["stages"][0]
print("| %d | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
    nbytes, 1e6 * loc["elapsed_s"] / batches, 1e6 * svc["elapsed_s"] / batches,
    1e6 * service["receive_s"] / batches, 1e6 * worker["send_s"] / batches,
    n * nbytes / svc["elapsed_s"] / 1e6))
PY
done
