#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The preprocessing service: trainers and `echoflow serve` workers in one
# mpirun job, on Fashion-MNIST packed into 6 WebDataset shards.
# - exactly once: a Python trainer reads 2 epochs from 3 workers, and each
#   epoch's keys are the 60,000 keys of the shards, each once; a trainer
#   that closes an epoch early gets the next one whole; 2 trainers share
#   an epoch between them, each key reaching one of them once;
# - dynamic sharding: of 2 workers, the one 10 times slower takes fewer
#   splits, and the trainer still gets the 60,000 samples;
# - samples that fit a message only one at a time all arrive;
# - echoflow train reads through the service to a target accuracy, with
#   automatic echoing, and 2 trainers keep their weights in sync;
# - refusals: workers or trainers started with settings that must agree
#   and do not, a job without trainers or without workers, serve outside
#   mpirun;
# - faults: a corrupt shard ends the job with the worker's rank, split and
#   file; a trainer or a worker that dies ends the job, mpirun naming it.
# Each launch runs under `timeout`, so a hang is a failure.
#
# usage: service_test.sh ECHOFLOW FASHION_MNIST_DIR PYTHONPATH
set -u
CLI=${1:?usage: service_test.sh ECHOFLOW FASHION_MNIST_DIR PYTHONPATH}
FMNIST=${2:?}
export PYTHONPATH=${3:?}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
MPIRUN=(timeout -k 10 300 mpirun --allow-run-as-root --bind-to none
    --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_service.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }

# shellcheck source=tests/mpi_kill.sh
. "$HERE/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

IDX="idx:images=$FMNIST/train-images-idx3-ubyte.gz,labels=$FMNIST/train-labels-idx1-ubyte.gz"
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | batch:1000"
"$CLI" pack "$IDX" "$TMP/train-%06d.tar" --per-shard 10000 >/dev/null ||
    { echo "FAIL: packing the shards" >&2; exit 1; }
TAR="tar:urls=$TMP/train-{000000..000005}.tar"
TRAINER=("$PY" "$HERE/service_trainer.py")
# python_trainer NAME: 0 where the Python trainer can run; a sanitizer
# build's package would need its runtimes preloaded into the interpreter
python_trainer() {
    [ -z "${EF_SANITIZED:-}" ] && [ -d "$PYTHONPATH/echoflow" ] && return 0
    echo "skip: $1 (the Python trainer: the developer build runs it)"
    return 1
}

# check_keys RECORD_PREFIX EPOCHS [FIRST]: every epoch from FIRST holds
# every key of the shards once, over all the trainers' records
check_keys() {
    "$PY" - "$TMP" "$@" <<'PY'
import glob, json, sys, tarfile
tmp, prefix, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
want = set()
for i in range(6):
    with tarfile.open("%s/train-%06d.tar" % (tmp, i)) as t:
        want |= {m.name.split(".", 1)[0] for m in t.getmembers()}
assert len(want) == 60000, len(want)
records = [json.load(open(p)) for p in sorted(glob.glob(prefix + ".*.json"))]
assert records, "no record"
for e in range(first, epochs):
    keys = [k for r in records for k in r["epochs"][e]["keys"]]
    assert len(keys) == len(set(keys)), "epoch %d: %d keys twice" % (
        e, len(keys) - len(set(keys)))
    assert set(keys) == want, "epoch %d: %d missing, %d extra" % (
        e, len(want - set(keys)), len(set(keys) - want))
    for r in records:
        said = r["epochs"][e]["said"]
        assert said in ([], [e]), "epoch %d read samples of %r" % (e, said)
    if len(records) > 1:
        assert all(r["epochs"][e]["keys"] for r in records), \
            "a trainer got nothing"
print("ok")
PY
}

if python_trainer "exactly once, epochs cut and shared"; then
# ---- exactly once: 1 trainer, 3 workers, 2 epochs ----------------------------
"${MPIRUN[@]}" -np 1 "${TRAINER[@]}" "$TMP/once" 2 : \
    -np 3 "$CLI" serve "$TAR | decode" --splits 6 --json \
    >"$TMP/once.out" 2>"$TMP/once.err"
rc=$?
if [ "$rc" -eq 0 ] && check_keys "$TMP/once" 2 >/dev/null &&
    [ "$(grep -c '"splits"' "$TMP/once.out")" -eq 3 ]; then
    pass "1 trainer, 3 workers: each of 2 epochs holds every key once"
else
    fail "exactly once: rc $rc: $(check_keys "$TMP/once" 2 2>&1 | tail -1) $(cat "$TMP/once.err")"
fi

# ---- an epoch closed early -----------------------------------------------------
"${MPIRUN[@]}" -np 1 "${TRAINER[@]}" "$TMP/cut" 2 1000 : \
    -np 2 "$CLI" serve "$TAR | decode" --splits 6 \
    >"$TMP/cut.out" 2>"$TMP/cut.err"
rc=$?
if [ "$rc" -eq 0 ] && check_keys "$TMP/cut" 2 1 >/dev/null; then
    pass "an epoch left after 1000 samples: the next is read whole, once"
else
    fail "cut epoch: rc $rc: $(check_keys "$TMP/cut" 2 1 2>&1 | tail -1) $(cat "$TMP/cut.err")"
fi

# ---- 2 trainers share each epoch -------------------------------------------------
"${MPIRUN[@]}" -np 2 "${TRAINER[@]}" "$TMP/two" 1 : \
    -np 2 "$CLI" serve "$TAR" --splits 6 \
    >"$TMP/two.out" 2>"$TMP/two.err"
rc=$?
if [ "$rc" -eq 0 ] && check_keys "$TMP/two" 1 >/dev/null; then
    pass "2 trainers, 2 workers: the epoch's keys split between them, once"
else
    fail "2 trainers: rc $rc: $(check_keys "$TMP/two" 1 2>&1 | tail -1) $(cat "$TMP/two.err")"
fi
fi

# ---- a slow worker takes fewer splits --------------------------------------------
"${MPIRUN[@]}" -np 1 "$CLI" run service --json : \
    -np 1 "$CLI" serve "$TAR" --splits 6 --throttle 2000 --json : \
    -np 1 "$CLI" serve "$TAR" --splits 6 --throttle 20000 --json \
    >"$TMP/slow.out" 2>"$TMP/slow.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/slow.out" <<'PY'; then
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
w = {d["rank"]: d for d in lines if "rank" in d}
trainer = [d for d in lines if "rank" not in d][0]
slow, fast = w[1], w[2]
assert slow["splits"] + fast["splits"] == 6, w
assert fast["splits"] > slow["splits"], w
assert slow["items"] + fast["items"] == 60000 == trainer["items"], lines
PY
    pass "a worker 10x slower takes fewer of the 6 splits: $(tr '\n' ' ' <"$TMP/slow.out" | grep -o '"splits": [0-9]*' | tr '\n' ' ')"
else
    fail "slow worker: rc $rc: $(cat "$TMP/slow.out" "$TMP/slow.err")"
fi

# ---- samples that fit a message one at a time ------------------------------------
# a 4M budget gives each message 1M: one 600 kB sample fits, two do not,
# and they come faster than a chunk ages, so each chunk is sent for the
# next sample while a spare one takes its place
"${MPIRUN[@]}" -np 1 "$CLI" run service --json : \
    -np 1 "$CLI" serve "range:n=200,bytes=600000" --splits 1 \
    --memory-budget 4M >"$TMP/big.out" 2>"$TMP/big.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/big.out" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["items"] == 200 and d["stages"][0]["messages"] == 200, d
PY
    pass "200 samples of 600 kB under a 4M budget: one per message"
else
    fail "one sample per message: rc $rc: $(cat "$TMP/big.out" "$TMP/big.err")"
fi

# ---- echoflow train through the service ------------------------------------------
SPEC='service:epochs=0 | shuffle:10000 | echo:factor=auto,max=4 | batch:128 | prefetch:4'
"${MPIRUN[@]}" -np 1 "$CLI" train --spec "$SPEC" --test-spec "$TEST" \
    --target-acc 0.8 --max-fresh 600000 --eval-every 10000 --json : \
    -np 2 "$CLI" serve "$TAR | decode" --splits 6 \
    >"$TMP/train.out" 2>"$TMP/train.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/train.out" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["reached"], d
assert d["final_accuracy"] >= 0.8, d["final_accuracy"]
assert d["echo"] and 1 <= d["echo"]["effective_factor"] <= 4, d["echo"]
PY
    pass "echoflow train reaches 80% on the workers' samples, echoing"
else
    fail "train: rc $rc: $(cat "$TMP/train.out" "$TMP/train.err")"
fi

# Two trainers run collectives on their main thread while the service's
# thread receives: Open MPI's progress engine, run by either, fills the
# other's buffers, a hand-over ThreadSanitizer cannot see (it reports the
# collective's result as written by the service's thread).
if [ "${EF_SANITIZED:-}" = thread ]; then
    echo "skip: 2 trainers (ThreadSanitizer cannot see Open MPI hand a collective's buffer between threads)"
else
"${MPIRUN[@]}" -np 2 "$CLI" train --spec "$SPEC" --test-spec "$TEST" \
    --max-fresh 20000 --eval-every 10000 --check-sync --threads 1 --json : \
    -np 2 "$CLI" serve "$TAR | decode" --splits 6 \
    >"$TMP/train2.out" 2>"$TMP/train2.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/train2.out" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["processes"] == 2, d
assert d["fresh"] >= 20000 and all(r["fresh"] > 0 for r in d["ranks"]), d
PY
    pass "2 trainers and 2 workers: weights in sync every step"
else
    fail "2 trainers: rc $rc: $(cat "$TMP/train2.out" "$TMP/train2.err")"
fi
fi

# ---- settings that must agree ------------------------------------------------------
# expect_refused NAME TEXT: the launch ended non-zero, not by timeout,
# saying TEXT, before anything was trained
expect_refused() {
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
        grep -qF -- "$2" "$TMP/$1.err" && ! grep -q "^fresh " "$TMP/$1.err"; then
        pass "refused (rc $rc): $2"
    else
        fail "$1: rc $rc, $(cat "$TMP/$1.err")"
    fi
}
"${MPIRUN[@]}" -np 1 "$CLI" run service : \
    -np 1 "$CLI" serve "$TAR" --splits 6 : -np 1 "$CLI" serve "$TAR" --splits 3 \
    >"$TMP/splits.out" 2>"$TMP/splits.err"
rc=$?
expect_refused splits "--splits differs between ranks: 6 on rank 1, 3 on rank 2"
"${MPIRUN[@]}" -np 1 "$CLI" run service : \
    -np 1 "$CLI" serve "$TAR" : -np 1 "$CLI" serve "$TAR | decode" \
    >"$TMP/spec.out" 2>"$TMP/spec.err"
rc=$?
expect_refused spec "the spec differs between ranks"
base=(train --spec "$SPEC" --test-spec "$TEST" --max-fresh 2000 --threads 1)
"${MPIRUN[@]}" -np 1 "$CLI" "${base[@]}" --model mlp : \
    -np 1 "$CLI" "${base[@]}" --model cnn : -np 1 "$CLI" serve "$TAR | decode" \
    >"$TMP/model.out" 2>"$TMP/model.err"
rc=$?
expect_refused model "--model differs between ranks: mlp on rank 0, cnn on rank 1"
"${MPIRUN[@]}" -np 2 "$CLI" serve "$TAR" >"$TMP/alone.out" 2>"$TMP/alone.err"
rc=$?
expect_refused alone "no trainer in this job"
"${MPIRUN[@]}" -np 1 "$CLI" run service >"$TMP/noworker.out" 2>"$TMP/noworker.err"
rc=$?
expect_refused noworker "no \`echoflow serve\` rank in this job"
"$CLI" serve "$TAR" >"$TMP/plain.out" 2>"$TMP/plain.err"
rc=$?
expect_refused plain "start it with mpirun"
"$CLI" run service >"$TMP/plainrun.out" 2>"$TMP/plainrun.err"
rc=$?
expect_refused plainrun "not started by mpirun"

# ---- a corrupt shard -------------------------------------------------------------
mkdir -p "$TMP/bad"
cp "$TMP"/train-00000[0-4].tar "$TMP/bad/"
head -c 5000000 "$TMP/train-000005.tar" >"$TMP/bad/train-000005.tar"
"${MPIRUN[@]}" -np 1 "$CLI" train \
    --spec 'service:epochs=0 | shuffle:1000 | batch:128' --test-spec "$TEST" \
    --max-fresh 200000 : -np 2 "$CLI" serve \
    "tar:urls=$TMP/bad/train-{000000..000005}.tar | decode" --splits 6 \
    >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
    grep -q "echoflow train: rank 0: echoflow serve, rank [12] (a worker), split 5 of 6 in epoch 0: .*train-000005.tar" "$TMP/bad.err"; then
    pass "a corrupt shard ends the job (rc $rc), naming the worker, split and file"
else
    fail "corrupt shard: rc $rc, $(cat "$TMP/bad.err")"
fi

# ---- a process that dies: a trainer (rank 0) or a worker (rank 2) ------------
for victim_rank in 0 2; do
    "${MPIRUN[@]}" -np 1 "$CLI" train --spec "$SPEC" --test-spec "$TEST" \
        --max-fresh 100000000 --eval-every 100000000 : \
        -np 2 "$CLI" serve "$TAR | decode" --splits 6 --throttle 5000 \
        >"$TMP/die.out" 2>"$TMP/die.err" &
    kill_rank $! "$victim_rank"
    if [ "$killed" != ended ]; then
        fail "kill: rank $victim_rank $killed: $(cat "$TMP/die.err")"
    elif [ "$rc" -ne 0 ] &&
        grep -q "process rank $victim_rank with PID .* signal 9" "$TMP/die.err"; then
        pass "rank $victim_rank dying ends the job (rc $rc) in $took s, mpirun naming it"
    else
        fail "kill rank $victim_rank: rc $rc, stderr: $(cat "$TMP/die.err")"
    fi
done

echo "$failures failed"
[ "$failures" -eq 0 ]
