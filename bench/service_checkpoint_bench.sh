#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The size and time of a checkpoint of `echoflow train` reading the
# preprocessing service, with 1, 2 and 3 trainers beside 2 workers: the
# pipeline state each trainer saves (the job's record: every trainer's
# is the same; the file keeps one), and the time of one checkpoint (the
# JSON's checkpoint_time_s over its checkpoints, process 0's clock: the
# trainers' records joined by a collective, the file written and
# fsync'd; with several trainers it includes waiting at the collective
# for the slowest one to reach the step).
#
#   bench/service_checkpoint_bench.sh [path/to/echoflow]
#
# Settings: 8,000 Fashion-MNIST samples packed into 8 shards, the
# workers `tar | decode` with --splits 8, the trainers `service:epochs=0
# | shuffle:1000 | echo:factor=2 | batch:32`, the MLP, --threads 1,
# 24,000 fresh examples (3 epochs), a checkpoint every 10 steps. Prints
# a markdown table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cli=${1:-$here/../build/echoflow}
fmnist=${EF_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$cli" ] || { echo "service_checkpoint_bench: build echoflow first ($cli)" >&2; exit 1; }
command -v mpirun >/dev/null ||
    { echo "service_checkpoint_bench: apt-get install openmpi-bin" >&2; exit 1; }
py=/usr/bin/python3
mpirun=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_svckbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

idx="idx:images=$fmnist/train-images-idx3-ubyte.gz,labels=$fmnist/train-labels-idx1-ubyte.gz"
"$cli" pack "$idx | take:8000" "$tmp/train-%06d.tar" --per-shard 1000 >/dev/null
test="idx:images=$fmnist/t10k-images-idx3-ubyte.gz,labels=$fmnist/t10k-labels-idx1-ubyte.gz | take:1000 | batch:1000"
spec="service:epochs=0 | shuffle:1000 | echo:factor=2 | batch:32"
serve=(-np 2 "$cli" serve "tar:urls=$tmp/train-{000000..000007}.tar | decode"
       --splits 8 --seed 3)

# the bytes of the one part's pipeline state in a checkpoint (a service
# spec's file keeps one part)
state_bytes() {
    local sizes
    sizes=$("$py" "$here/checkpoint_parts.py" "$1")
    [ "$(wc -l <<<"$sizes")" -eq 1 ] ||
        { echo "service_checkpoint_bench: $1 has more than one part" >&2; exit 1; }
    echo "$sizes"
}

echo "commit $(git -C "$here" rev-parse --short HEAD), $(nproc) cores, $(date -u +%F)"
echo
echo "| trainers | parts in the file | state bytes per trainer | checkpoints | ms each |"
echo "| --- | ---: | ---: | ---: | ---: |"
for m in 1 2 3; do
    ck="$tmp/run$m.ck"
    apps=()
    for ((r = 0; r < m; r++)); do
        [ "$r" -gt 0 ] && apps+=(:)
        apps+=(-np 1 "$cli" train --spec "$spec" --test-spec "$test"
               --max-fresh 24000 --eval-every 100000000 --threads 1 --seed 3
               --checkpoint "$ck" --checkpoint-every 10 --json)
    done
    "${mpirun[@]}" "${apps[@]}" : "${serve[@]}" >"$tmp/run.json"
    "$py" - "$tmp/run.json" "$m" "$(state_bytes "$ck")" <<'EOF'
import json, sys
run = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("| %s | 1 | %s | %d | %.1f |" % (
    sys.argv[2], sys.argv[3], run["checkpoints"],
    1e3 * run["checkpoint_time_s"] / run["checkpoints"]))
EOF
done
