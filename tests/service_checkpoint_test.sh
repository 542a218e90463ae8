#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checkpoints of a trainer that reads the preprocessing service: 1
# `echoflow train` and 2 `echoflow serve` workers over 4,000 Fashion-MNIST
# samples packed into 4 shards, killed with SIGKILL twice after a
# checkpoint, mid-epoch (a worker, then the trainer), and resumed each
# time with --resume until it ends. The spec's last stage, trace, lists
# what the trainer was handed, a line per step; the steps each run
# trained before the checkpoint the next one resumed from, put together,
# must hold every sample of the epochs the kills cut exactly once
# (fresh: echo copy 0), and each kill must have cut an epoch (samples of
# it before and after). Then checkpoints saved beside workers of another
# --splits, --seed or spec are refused, naming what differs.
#
# usage: service_checkpoint_test.sh ECHOFLOW FASHION_MNIST_DIR
set -u
CLI=${1:?usage: service_checkpoint_test.sh ECHOFLOW FASHION_MNIST_DIR}
FMNIST=${2:?}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
MPIRUN=(timeout -k 10 120 mpirun --allow-run-as-root --bind-to none
    --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_service_ck.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }
if ! "$CLI" train --help >/dev/null 2>&1; then
    echo "skip: this echoflow has no trainer (OpenBLAS missing)"
    exit 0
fi
# shellcheck source=tests/mpi_kill.sh
. "$HERE/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

IDX="idx:images=$FMNIST/train-images-idx3-ubyte.gz,labels=$FMNIST/train-labels-idx1-ubyte.gz"
"$CLI" pack "$IDX | take:4000" "$TMP/train-%06d.tar" --per-shard 1000 \
    >/dev/null || { echo "FAIL: packing the shards" >&2; exit 1; }
TAR="tar:urls=$TMP/train-{000000..000003}.tar"
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | take:1000 | batch:1000"
TRACE="$TMP/trace.log"
CK="$TMP/run.ck"
SPEC="service:epochs=0 | shuffle:500 | echo:factor=2 | batch:32 | trace:path=$TRACE"
# 3 epochs; the workers throttled so that the run takes seconds
TRAIN=(train --spec "$SPEC" --test-spec "$TEST" --max-fresh 12000
    --eval-every 100000 --threads 1 --seed 3 --checkpoint "$CK"
    --checkpoint-every 10 --resume)
SERVE=(serve "$TAR | decode" --splits 4 --seed 3 --throttle 1500)

lines() { if [ -f "$TRACE" ]; then wc -l <"$TRACE"; else echo 0; fi; }

# run NAME VICTIM_RANK: the job, its trace lines from here on; with a
# victim, that rank is killed once the run has replaced the checkpoint
# 3 times (so at least 20 steps after its start, mid-epoch)
run() {
    local name=$1 victim=${2:-}
    starts+=("$(lines)")
    "${MPIRUN[@]}" -np 1 "$CLI" "${TRAIN[@]}" : -np 2 "$CLI" "${SERVE[@]}" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local job=$!
    if [ -z "$victim" ]; then
        wait "$job"
        rc=$?
        return
    fi
    checkpoints_replaced "$job" "$CK" 3
    KILL_AFTER=0 kill_rank "$job" "$victim"
}

starts=()
run first 2
k1=$killed rc1=$rc
run second 0
k2=$killed rc2=$rc
run last
rc3=$rc
starts+=("$(lines)")
step() { sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/$1.err"; }
s2=$(step second)
s3=$(step last)
if [ "$k1" != ended ] || [ "$k2" != ended ] || [ "$rc1" -eq 0 ] ||
    [ "$rc2" -eq 0 ] || [ "$rc3" -ne 0 ] || [ -z "$s2" ] || [ -z "$s3" ]; then
    fail "the runs: worker killed: $k1 (rc $rc1), trainer killed: $k2 (rc $rc2), last rc $rc3, resumed at steps '${s2}' and '${s3}': $(cat "$TMP/second.err" "$TMP/last.err" | tail -20)"
elif out=$("$PY" - "$HERE" "$TMP" "$TRACE" "${starts[@]}" "$s2" "$s3" <<'PY' 2>&1
import sys
sys.path.insert(0, sys.argv[1])
from service_keys import fresh, once, packed
tmp, trace = sys.argv[2], sys.argv[3]
starts = [int(v) for v in sys.argv[4:8]]
s2, s3 = int(sys.argv[8]), int(sys.argv[9])
want = packed(tmp)
assert len(want) == 4000, len(want)
steps = [l.split() for l in open(trace)]
runs = [steps[starts[i]:starts[i + 1]] for i in range(3)]
# each run's steps up to the checkpoint the next resumed from
kept = [runs[0][:s2], runs[1][:s3 - s2], runs[2]]
assert len(runs[0]) >= s2 and len(runs[1]) >= s3 - s2 > 0, \
    (len(runs[0]), s2, len(runs[1]), s3)
cut_epochs = set()
for i, s in ((0, s2), (1, s3 - s2)):  # the epochs each kill cut
    before = {e for e, _ in fresh(kept[i][-1:])}
    after = {e for e, _ in fresh(runs[i + 1][:1])}
    cut_epochs |= before & after
    assert before & after, "run %d's checkpoint cut no epoch: %r %r" % (
        i + 1, before, after)
once([f for part in kept for f in fresh(part)], cut_epochs | {0, 1}, want)
print("epochs %s each exactly once; cut at steps %d and %d" % (
    sorted(cut_epochs), s2, s3))
PY
); then
    pass "a worker, then the trainer killed after a checkpoint: $out"
else
    fail "exactly once over the runs: $out"
fi

# ---- checkpoints of other workers ------------------------------------------
# refused WHAT TEXT SERVE_ARGS...: resuming beside workers given
# SERVE_ARGS fails before training, saying TEXT
refused() {
    local what=$1 text=$2
    shift 2
    cp "$CK" "$TMP/other.ck"
    local args=("${TRAIN[@]}")
    args[${#args[@]}-4]="$TMP/other.ck" # --checkpoint's path
    "${MPIRUN[@]}" -np 1 "$CLI" "${args[@]}" : -np 2 "$CLI" serve "$@" \
        >"$TMP/refused.out" 2>"$TMP/refused.err"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
        grep -qF -- "$text" "$TMP/refused.err"; then
        pass "another $what refused (rc $rc): $(grep -o "service: .*" "$TMP/refused.err" | head -1 | cut -c1-100)"
    else
        fail "another $what: rc $rc, $(tail -5 "$TMP/refused.err")"
    fi
}
refused "--splits" "--splits differs between the workers of the checkpoint and this job's: 4 then, 2 now" \
    "$TAR | decode" --splits 2 --seed 3
refused "--seed" "--seed differs between the workers of the checkpoint and this job's: 3 then, 4 now" \
    "$TAR | decode" --splits 4 --seed 4
refused "spec" "the spec differs between the workers of the checkpoint and this job's" \
    "$TAR" --splits 4 --seed 3

echo "$failures failed"
[ "$failures" -eq 0 ]
