#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checkpoints of several trainers reading the preprocessing service,
# resumed on other numbers of trainers and workers: `echoflow train`
# ranks and `echoflow serve` workers over 4,000 Fashion-MNIST samples
# packed into 4 shards (--splits 4 given, so the worker count may
# change), each run killed with SIGKILL after a checkpoint, mid-epoch,
# and the next resumed from it with --resume:
#   chain A: 2 trainers beside 2 workers -> 2 trainers -> 1 trainer ->
#            3 trainers beside 3 workers -> 1 trainer beside 2 workers,
#            run to its end;
#   chain B: from chain A's second checkpoint of 2 trainers, 3 trainers
#            -> 2 trainers, run to its end.
# (the last runs of few processes: the machine running the tests may
# have 2 cores, and 6 busy processes make a run slow)
# The spec's last stage, trace, lists what each trainer was handed, a
# line per step, each rank in a folder of its own (its working
# directory); the steps each run trained before the checkpoint the next
# one resumed from, put together over every trainer, must hold every
# sample of epochs 0 and 1 and of the epochs the kills cut exactly once
# (fresh: echo copy 0), and each kill must have cut an epoch.
#
# usage: service_elastic_test.sh ECHOFLOW FASHION_MNIST_DIR
set -u
CLI=${1:?usage: service_elastic_test.sh ECHOFLOW FASHION_MNIST_DIR}
FMNIST=${2:?}
# each trainer runs in a folder of its own
CLI=$(cd "$(dirname "$CLI")" && pwd)/$(basename "$CLI")
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
MPIRUN=(timeout -k 10 150 mpirun --allow-run-as-root --bind-to none
    --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_service_el.XXXXXX")
trap '[ -n "${EF_KEEP:-}" ] || rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }
# Several trainers run collectives on their main thread while the
# service's thread receives: Open MPI's progress engine, run by either,
# fills the collective's buffer, and ThreadSanitizer, which cannot see
# inside Open MPI, reports the gradients as written by the service's
# thread (service_test.sh skips its two trainers alike).
if [ "${EF_SANITIZED:-}" = thread ]; then
    echo "skip: several trainers (ThreadSanitizer cannot see Open MPI hand a collective's buffer between threads)"
    exit 0
fi
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
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | take:500 | batch:500"
# a path of its own per rank: each runs in its run's folder r<RANK>
SPEC="service:epochs=0 | shuffle:100 | echo:factor=2 | batch:32 | trace:path=trace.log"
# 3 epochs, a short shuffle so that no trainer's buffer still holds a
# sample of epoch 1 at the end; the workers throttled so that a run
# takes seconds; a checkpoint every 5 steps (under a sanitizer every 2:
# a step is slower)
EVERY=5
[ -n "${EF_SANITIZED:-}" ] && EVERY=2
train_args() { # CHECKPOINT: into ARGS
    ARGS=(--spec "$SPEC" --test-spec "$TEST" --max-fresh 12000
        --eval-every 100000 --threads 1 --seed 3 --checkpoint "$1"
        --checkpoint-every "$EVERY" --resume)
}
SERVE=(serve "$TAR | decode" --splits 4 --seed 3 --throttle 1500)

# run NAME CHECKPOINT TRAINERS WORKERS [kill]: the job, each trainer in
# $TMP/NAME/r<RANK>; with kill, trainer rank 1 (rank 0 alone with one
# trainer) is killed once the run has replaced the checkpoint twice
# (mid-epoch)
run() {
    local name=$1 ck=$2 m=$3 w=$4 victim=${5:-} r
    local apps=()
    train_args "$ck"
    for ((r = 0; r < m; r++)); do
        mkdir -p "$TMP/$name/r$r"
        [ "$r" -gt 0 ] && apps+=(:)
        apps+=(-np 1 -wdir "$TMP/$name/r$r" "$CLI" train "${ARGS[@]}")
    done
    "${MPIRUN[@]}" "${apps[@]}" : -np "$w" "$CLI" "${SERVE[@]}" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local job=$!
    if [ -z "$victim" ]; then
        wait "$job"
        rc=$?
        killed=none
        return
    fi
    checkpoints_replaced "$job" "$ck" 2
    KILL_AFTER=0 kill_rank "$job" $((m > 1 ? 1 : 0))
}
step() { sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/$1.err"; }

# check CHAIN RUN...: every sample of the epochs once over RUN... (each
# killed but the last, each resumed from the one before)
check() {
    local chain=$1
    shift
    local steps=() r
    for r in "${@:2}"; do
        steps+=("$(step "$r")")
        [ -n "${steps[-1]}" ] ||
            { fail "$chain: $r did not resume: $(tail -5 "$TMP/$r.err")"; return; }
    done
    if out=$("$PY" - "$HERE" "$TMP" "$*" "${steps[*]}" <<'PY' 2>&1
import glob, sys
sys.path.insert(0, sys.argv[1])
from service_keys import fresh, once, packed
tmp, runs, steps = sys.argv[2], sys.argv[3].split(), \
    [int(s) for s in sys.argv[4].split()]
want = packed(tmp)
assert len(want) == 4000, len(want)
# per run, per trainer: its steps (each a line), from the run's start
traces = [[[l.split() for l in open(p)]
           for p in sorted(glob.glob("%s/%s/r*/trace.log" % (tmp, run)))]
          for run in runs]
starts = [0] + steps  # the step each run started from
kept, cut = [], set()
for i, ranks in enumerate(traces):
    # the steps up to the checkpoint the next run resumed from
    n = steps[i] - starts[i] if i < len(steps) else None
    assert n is None or n > 0, (runs[i], starts, steps)
    for t, lines in enumerate(ranks):
        assert n is None or len(lines) >= n, (runs[i], t, len(lines), n)
        kept += fresh(lines[:n])
    if n is not None:  # the epochs this kill cut: before and after it
        before = {e for r in ranks for e, _ in fresh(r[n - 1:n])}
        after = {e for r in traces[i + 1] for e, _ in fresh(r[:1])}
        assert before & after, "%s's checkpoint cut no epoch: %r %r" % (
            runs[i], before, after)
        cut |= before & after
once(kept, cut | {0, 1}, want)
print("epochs %s each exactly once; resumed at steps %s" % (
    sorted(cut | {0, 1}), steps))
PY
    ); then
        pass "$chain: $out"
    else
        fail "$chain: exactly once over the runs: $out"
    fi
}

# killed_ok NAME: the run was killed, and failed
killed_ok() {
    if [ "$killed" != ended ] || [ "${rc:-0}" -eq 0 ]; then
        fail "$1: killed: $killed (rc ${rc:-none}): $(tail -5 "$TMP/$1.err")"
        return 1
    fi
}

CK="$TMP/a.ck"
run a1 "$CK" 2 2 kill
killed_ok a1
run a2 "$CK" 2 2 kill
killed_ok a2
cp "$CK" "$TMP/b.ck"
run a3 "$CK" 1 2 kill
killed_ok a3
run a4 "$CK" 3 3 kill
killed_ok a4
run a5 "$CK" 1 2
[ "$rc" -eq 0 ] || fail "a5: rc $rc: $(tail -5 "$TMP/a5.err")"
check "2 trainers -> 2 -> 1 -> 3 beside 3 workers -> 1 beside 2" \
    a1 a2 a3 a4 a5
run b3 "$TMP/b.ck" 3 2 kill
killed_ok b3
run b4 "$TMP/b.ck" 2 2
[ "$rc" -eq 0 ] || fail "b4: rc $rc: $(tail -5 "$TMP/b4.err")"
check "2 trainers -> 2 -> 3 -> 2" a1 a2 b3 b4

echo "$failures failed"
[ "$failures" -eq 0 ]
