#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `echoflow train` under mpirun, two processes on this machine:
# - one pass over Fashion-MNIST: the processes' fresh examples add up to
#   the data set exactly, 30,000 each, with --check-sync checking after
#   every step that both hold the same weights, bit for bit;
# - 2 processes with batch 64 follow 1 process with batch 128: each step's
#   two batches are the one batch's halves (records 2k and 2k + 1 of the
#   same 128), so the weights after 100 steps agree within float rounding
#   (later, as a ReLU near zero flips one way in one run and the other way
#   in the other, the difference grows: on AVX-512 OpenBLAS kernels, 4e-8
#   after 100 steps, 1.7e-4 after 200, 6.5e-4 after the pass).
#   That, and the pass's trace of identities (every record once), are the
#   test that the processes' parts are disjoint and together the data set
#   once: a record read twice or missed would move the weights.
#   Plain SGD at a small rate: with momentum the rounding differences of
#   two summation orders grow until runs part (1e-7 at step 125, 1e-2 by
#   step 157 at lr 0.03), whether the order changes with the processes or
#   with --threads;
# - processes started with settings that must agree and do not are
#   refused, naming the option and both values;
# - a process that dies makes the run end with an error within seconds.
#
# usage: mpi_test.sh ECHOFLOW FASHION_MNIST_DIR
set -u
CLI=${1:?usage: mpi_test.sh ECHOFLOW FASHION_MNIST_DIR}
FMNIST=${2:?}
PY=/usr/bin/python3
MPIRUN=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_mpi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }

# shellcheck source=tests/mpi_kill.sh
. "$(dirname "$0")/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

TRAIN="idx:images=$FMNIST/train-images-idx3-ubyte.gz,labels=$FMNIST/train-labels-idx1-ubyte.gz"
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | batch:1000"
# one pass, in file order: no shuffle, no repeat
common=(train --test-spec "$TEST" --eval-every 1000000 --threads 1 --json)

# ---- one pass, two processes ------------------------------------------------
sgd=(--lr 0.01 --momentum 0)
"${MPIRUN[@]}" -np 2 "$CLI" "${common[@]}" "${sgd[@]}" \
    --spec "$TRAIN | batch:64 | trace:path=$TMP/pass.trace" \
    --check-sync >"$TMP/two.out" 2>"$TMP/two.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/two.out" "$TMP/pass.trace" <<'PY'; then
import collections, json, sys
seen = collections.Counter(int(ident.split(":")[1])
                           for line in open(sys.argv[2]) for ident in line.split())
assert sorted(seen) == list(range(60000)) and set(seen.values()) == {1}, \
    "records read other than once: %d distinct" % len(seen)
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "one report, from process 0 only: %r" % lines
d = json.loads(lines[0])
assert d["processes"] == 2, d
assert d["fresh"] == 60000 and d["examples"] == 60000, d
assert [r["fresh"] for r in d["ranks"]] == [30000, 30000], d["ranks"]
assert [r["batches"] for r in d["ranks"]] == [469, 469], d["ranks"]
assert d["steps"] == 469, d["steps"]
assert d["comm_s"] > 0 and d["comm_ms_per_step"] > 0, d
assert d["final_accuracy"] > 0.6, d["final_accuracy"]
PY
    pass "2 processes: one pass, every record once, 60000 fresh (30000 each), weights in sync every step"
else
    fail "2 processes: rc $rc: $(cat "$TMP/two.out" "$TMP/two.err")"
fi

# ---- 1 process with batch 128 against 2 with batch 64 --------------------
"${MPIRUN[@]}" -np 2 "$CLI" "${common[@]}" "${sgd[@]}" --spec "$TRAIN | batch:64" \
    --max-fresh 12800 --save-model "$TMP/two.model" >/dev/null 2>"$TMP/two.err" &&
"$CLI" "${common[@]}" "${sgd[@]}" --spec "$TRAIN | batch:128" \
    --max-fresh 12800 --save-model "$TMP/one.model" >"$TMP/one.out" 2>"$TMP/one.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/one.model" "$TMP/two.model" \
        "$TMP/one.out" <<'PY'; then
import json, struct, sys
import numpy

def load(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"EFTMODEL", path
    version, arch, count = struct.unpack_from("<3I", data, 8)
    assert version == 1 and arch == 0, (version, arch)
    at, out = 20, []
    for _ in range(count):
        (n,) = struct.unpack_from("<Q", data, at)
        out.append(numpy.frombuffer(data, "<f4", n, at + 8))
        at += 8 + 4 * n
    assert at == len(data), "trailing bytes"
    return out

one, two = load(sys.argv[1]), load(sys.argv[2])
assert json.load(open(sys.argv[3]))["steps"] == 100
assert len(one) == len(two) == 6
# measured: 4.5e-8 at most, of weights up to 0.37
scale = max(float(numpy.abs(a).max()) for a in one)
worst = max(float(numpy.abs(a - b).max()) for a, b in zip(one, two))
assert worst <= 1e-5 * scale, (worst, scale)
PY
    pass "2 processes with batch 64 follow 1 with batch 128 within float rounding"
else
    fail "1 against 2 processes: rc $rc: $(cat "$TMP/two.err" "$TMP/one.err")"
fi

# ---- --check-sync outside mpirun is refused -----------------------------------
"$CLI" train --data fashion-mnist --check-sync >"$TMP/sync.out" 2>"$TMP/sync.err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "under mpirun" "$TMP/sync.err"; then
    pass "--check-sync without mpirun: refused, saying why"
else
    fail "--check-sync alone: rc $rc, $(cat "$TMP/sync.err")"
fi

# ---- each process echoes by its own R ---------------------------------------
"${MPIRUN[@]}" -np 2 "$CLI" train --data fashion-mnist --echo factor=auto,max=4 \
    --throttle 20000 --max-fresh 20000 --eval-every 10000 --json \
    >"$TMP/echo.out" 2>"$TMP/echo.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/echo.out" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
ranks = d["ranks"]
assert d["fresh"] == sum(r["fresh"] for r in ranks) >= 20000, d
assert d["examples"] >= d["fresh"], d
for r in ranks:
    assert 1 <= r["effective_factor"] <= 4 and r["r_estimate"] > 0, r
lo, hi = d["echo_spread"]["effective_factor"]
assert lo == min(r["effective_factor"] for r in ranks), d["echo_spread"]
assert hi == max(r["effective_factor"] for r in ranks), d["echo_spread"]
lo, hi = d["echo_spread"]["r_estimate"]
assert lo == min(r["r_estimate"] for r in ranks), d["echo_spread"]
PY
    pass "auto echo per process: factors, R and their spread reported"
else
    fail "echo per process: rc $rc: $(cat "$TMP/echo.out" "$TMP/echo.err")"
fi

# ---- processes started with other settings -------------------------------------
# Each option that must agree, on rank 1 otherwise than on rank 0 (an MPMD
# launch): refused before training, naming the option and both values,
# every process exiting non-zero; `timeout` turns a hang into a failure.
# Unchecked, another --model overran buffers, another --max-fresh hung,
# another --lr trained apart silently, another --eval-every failed with
# MPI_ERR_TRUNCATE.
base=(train --data fashion-mnist --threads 1 --max-fresh 2000 --eval-every 1000)
mpmd() { # mpmd NAME "RANK 0 OPTIONS" "RANK 1 OPTIONS"
    local name=$1
    # shellcheck disable=SC2086
    timeout -k 10 300 "${MPIRUN[@]}" -np 1 "$CLI" "${base[@]}" $2 : \
        -np 1 "$CLI" "${base[@]}" $3 >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
}
for case in "--model mlp|--model cnn|mlp on rank 0, cnn on rank 1" \
    "--max-fresh 2000|--max-fresh 3000|2000 on rank 0, 3000 on rank 1" \
    "--lr 0.05|--lr 0.1|0.05 on rank 0, 0.1 on rank 1" \
    "--eval-every 1000|--eval-every 500|1000 on rank 0, 500 on rank 1" \
    "--echo factor=2|--echo factor=3|factor=2 on rank 0, factor=3 on rank 1"; do
    IFS='|' read -r mine theirs want <<<"$case"
    opt=${mine%% *}
    mpmd differs "$mine" "$theirs"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
        grep -qF -- "$opt differs between ranks: $want" "$TMP/differs.err" &&
        ! grep -q "MPI_ABORT\|^fresh " "$TMP/differs.err" &&
        [ ! -s "$TMP/differs.out" ]; then
        pass "$opt differing between ranks: refused (rc $rc), naming both values"
    else
        fail "$opt differing between ranks: rc $rc, $(cat "$TMP/differs.err")"
    fi
done
# options a machine may set for itself
mpmd own "--threads 1" "--threads 2 --json --memory-budget 512M"
if [ "$rc" -eq 0 ] && grep -q "^final test accuracy" "$TMP/own.out"; then
    pass "--threads, --json and --memory-budget may differ between ranks"
else
    fail "own settings per rank: rc $rc, $(cat "$TMP/own.out" "$TMP/own.err")"
fi

# ---- a process that dies ------------------------------------------------------
"${MPIRUN[@]}" -np 2 "$CLI" train --data fashion-mnist --max-fresh 100000000 \
    --eval-every 100000000 --threads 1 >"$TMP/die.out" 2>"$TMP/die.err" &
kill_rank $! 1
if [ "$killed" != ended ]; then
    fail "kill: rank 1 $killed: $(cat "$TMP/die.err")"
elif [ "$rc" -ne 0 ] && grep -qi "signal 9\|killed" "$TMP/die.err"; then
    pass "a dead process ends the run (rc $rc) in $took s, saying so"
else
    fail "kill: rc $rc, stderr: $(cat "$TMP/die.err")"
fi

echo "$failures failed"
[ "$failures" -eq 0 ]
