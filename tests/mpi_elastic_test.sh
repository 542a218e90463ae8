#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Elastic resume of `echoflow train`: a run reading its data as 6
# partitions (--partitions 6, trainer.h's eft_job says how they are dealt)
# - gives every partition the same batches in the same order on 1, 2 and
#   3 processes (each partition's trace of identities is the same);
# - killed with SIGKILL on 2 processes, resumed on 3, killed again and
#   resumed on 1 outside mpirun, every partition goes on exactly where
#   its last checkpoint left it: its batches over the three runs, each
#   cut where the next one resumed, are the uninterrupted run's, so every
#   example of every pass comes once (its fresh copy) and no copy twice;
# - a number of processes that does not divide the partitions, and a
#   resume with other partitions, are refused, naming both counts.
#
# usage: mpi_elastic_test.sh ECHOFLOW FASHION_MNIST_DIR
set -u
CLI=${1:?usage: mpi_elastic_test.sh ECHOFLOW FASHION_MNIST_DIR}
FMNIST=${2:?}
PY=/usr/bin/python3
MPIRUN=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_mpi_elastic.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }

# shellcheck source=tests/mpi_kill.sh
. "$(dirname "$0")/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

P=6
PER=300 # examples of each partition, read over and over
# spec TRACE: each partition's pipeline; the trace lists the batches the
# trainer takes, one line each, identities epoch:index:copy (a
# partition's examples are those whose index % 6 is its number)
spec() {
    echo "idx:images=$FMNIST/train-images-idx3-ubyte.gz,labels=$FMNIST/train-labels-idx1-ubyte.gz |" \
        "take:$PER | shuffle:$PER | repeat | echo:factor=2,shuffle=100 |" \
        "batch:16 | prefetch:4 | trace:path=$1"
}
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | take:1000 | batch:1000"
# 4 passes over each partition's examples
FRESH=$((P * PER * 4)) EVERY=10 LIMIT=300
OPTS=(--test-spec "$TEST" --threads 1 --max-fresh "$FRESH" --eval-every 100000
      --seed 3 --partitions "$P")

# run NAME NP ARGS...: `echoflow train ARGS` on NP processes (0: one,
# outside mpirun); stdout and stderr to $TMP/NAME.out and .err, exit
# status in $rc
run() {
    local name=$1 np=$2
    shift 2
    if [ "$np" -eq 0 ]; then
        timeout -k 10 "$LIMIT" "$CLI" train "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    else
        timeout -k 10 "$LIMIT" "${MPIRUN[@]}" -np "$np" "$CLI" train "$@" \
            >"$TMP/$name.out" 2>"$TMP/$name.err"
    fi
    rc=$?
}

# ---- the order of each partition, on 1, 2 and 3 processes ------------------
for np in 0 2 3; do
    run "ref$np" "$np" --spec "$(spec "$TMP/ref$np.trace")" "${OPTS[@]}" --json
    [ "$rc" -eq 0 ] || { echo "FAIL: uninterrupted on $np: rc $rc, $(cat "$TMP/ref$np.err")" >&2; exit 1; }
done
"$PY" - "$TMP" "$P" <<'EOF2' || fail "the partitions' order depends on the number of processes"
import sys
tmp, P = sys.argv[1], int(sys.argv[2])
def streams(path):
    s = [[] for _ in range(P)]
    for line in open(path):
        first = line.split()[0]
        s[int(first.split(":")[1]) % P].append(line)
    return s
runs = {np: streams("%s/ref%s.trace" % (tmp, np)) for np in ("0", "2", "3")}
for p in range(P):
    n = min(len(r[p]) for r in runs.values())
    assert n > 4 * 300 * 2 / 16 * 0.9, (p, n)
    for np, r in runs.items():
        assert r[p][:n] == runs["0"][p][:n], "partition %d differs on %s processes" % (p, np)
print("ok: every partition's batches come in the same order on 1, 2 and 3 processes")
EOF2

# ---- killed on 2, resumed on 3, killed, resumed on 1 -------------------------
CK="$TMP/run.ck"
TRACE="$TMP/job.trace"
CKARGS=(--spec "$(spec "$TRACE")" "${OPTS[@]}" --checkpoint "$CK"
        --checkpoint-every "$EVERY" --resume)
marks=()  # the trace's length when each run began
steps=()  # where each run resumed
for np in 2 3; do
    marks+=("$(cat "$TRACE" 2>/dev/null | wc -l)")
    before=$(ck_id "$CK")
    timeout -k 10 "$LIMIT" "${MPIRUN[@]}" -np "$np" "$CLI" train "${CKARGS[@]}" \
        >"$TMP/attempt$np.out" 2>"$TMP/attempt$np.err" &
    launcher=$!
    # a checkpoint past the one the run started from, then a little more
    for _ in 1 2; do
        while kill -0 "$launcher" 2>/dev/null && [ "$(ck_id "$CK")" = "$before" ]; do
            sleep 0.02
        done
        before=$(ck_id "$CK")
    done
    if ! kill -0 "$launcher" 2>/dev/null; then
        fail "the run on $np processes ended before it could be killed: $(cat "$TMP/attempt$np.err")"
        break
    fi
    KILL_AFTER=0.2 kill_rank "$launcher" $((np - 1))
    [ "$killed" = ended ] && [ "$rc" -ne 0 ] ||
        fail "the run on $np processes: rank $((np - 1)) $killed, rc $rc"
    steps+=("$(sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/attempt$np.err")")
done
marks+=("$(wc -l <"$TRACE")")
run last 0 "${CKARGS[@]}" --json
steps+=("$(sed -n 's/.*"resumed_at_step": *\([0-9]*\).*/\1/p' "$TMP/last.out")")
[ "$rc" -eq 0 ] || fail "the resume on 1 process: rc $rc, $(cat "$TMP/last.err")"
# the first run started afresh; each later one from a later step
if [ -n "${steps[0]}" ] || [ -z "${steps[1]}" ] || [ -z "${steps[2]}" ] ||
    [ "${steps[2]}" -le "${steps[1]}" ]; then
    fail "resumed at steps '${steps[*]}': expected none, then later and later"
fi
"$PY" - "$TMP" "$P" "$PER" "$TRACE" "${marks[@]}" <<'EOF2' ||
import sys
tmp, P, PER, trace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
marks = [int(m) for m in sys.argv[5:]]
lines = open(trace).readlines()
bounds = marks + [len(lines)]
def streams(ls):
    s = [[] for _ in range(P)]
    for line in ls:
        s[int(line.split()[0].split(":")[1]) % P].append(line)
    return s
runs = [streams(lines[bounds[i]:bounds[i + 1]]) for i in range(len(marks))]
ref = streams(open("%s/ref2.trace" % tmp).readlines())
for p in range(P):
    # where each run's batches of p begin in the uninterrupted run's
    starts = [ref[p].index(r[p][0]) if r[p] else None for r in runs]
    assert starts[0] == 0, (p, starts)
    joined = []
    for i, r in enumerate(runs):
        nxt = next((s for s in starts[i + 1:] if s is not None), None)
        mine = r[p]
        if nxt is not None:
            # a run gives up to where the next resumed, no less
            assert starts[i] is None or len(joined) + len(mine) >= nxt, \
                "partition %d: run %d stopped at %d, the next resumed at %d" % (
                    p, i, len(joined) + len(mine), nxt)
            mine = mine[:max(0, nxt - len(joined))]
        joined += mine
    n = min(len(joined), len(ref[p]))
    assert n >= len(ref[p]) - 2, (p, len(joined), len(ref[p]))
    assert joined[:n] == ref[p][:n], "partition %d: the resumed batches differ" % p
    # by key: each pass gives each of the partition's examples once fresh
    seen, fresh = set(), {}
    for line in joined:
        for ident in line.split():
            epoch, index, copy = (int(x) for x in ident.split(":"))
            assert (epoch, index, copy) not in seen, ("twice", p, ident)
            seen.add((epoch, index, copy))
            if copy == 0:
                fresh.setdefault(epoch, set()).add(index)
    # the echo stage's buffer (100) holds back the end of a pass into the
    # next: the passes before the last two are whole
    whole = [e for e in fresh if e < max(fresh) - 1]
    assert len(whole) >= 2, (p, sorted(fresh))
    for e in whole:
        assert len(fresh[e]) == PER and all(i % P == p for i in fresh[e]), (p, e, len(fresh[e]))
print("ok: killed on 2 processes, resumed on 3, killed, resumed on 1: every"
      " partition's batches are the uninterrupted run's, each example once a pass")
EOF2
    fail "the resumed runs did not go on exactly where the checkpoints left each partition"
pass "resumed at steps: ${steps[*]:1}"

# ---- refusals ------------------------------------------------------------------
run uneven 4 --spec "$(spec "$TMP/uneven.trace")" "${OPTS[@]}"
[ "$rc" -eq 2 ] && grep -qF -- "--partitions 6 cannot be dealt evenly to 4 processes" "$TMP/uneven.err" &&
    pass "4 processes refused: $(grep -m 1 partitions "$TMP/uneven.err")" ||
    fail "4 processes of 6 partitions: rc $rc, $(cat "$TMP/uneven.err")"
cp "$CK" "$TMP/other.ck"
OTHER=(--spec "$(spec "$TRACE")" "${OPTS[@]}")
run other 3 "${OTHER[@]}" --partitions 3 --checkpoint "$TMP/other.ck" --resume
grep -qF "saved by a run of 6 partitions; this run has 3 partitions" "$TMP/other.err" &&
    [ "$rc" -ne 0 ] && cmp -s "$CK" "$TMP/other.ck" &&
    pass "other partitions refused" ||
    fail "resuming 6 partitions as 3: rc $rc, $(cat "$TMP/other.err")"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all elastic resume checks passed"
