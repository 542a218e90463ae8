#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The preprocessing service's limits, each in an mpirun job of `echoflow
# run` as the trainer and `echoflow serve` workers:
# - liveness: a worker stopped (SIGSTOP) fails the trainer's reading
#   within its liveness timeout, naming the worker, and the job ends
#   instead of waiting for it for good;
# - memory: samples larger than a message's room, read slower than the
#   workers send them, stay within the trainer's memory budget (peak RSS
#   over a run of small samples: the budget, and slack for the sample the
#   consumer holds and MPI's buffers), and the budget's figures count
#   them (under a sanitizer, whose allocator keeps freed memory, only the
#   figures); a sample over the trainer's whole budget fails, saying so.
# Each launch runs under `timeout`, so a hang is a failure.
#
# usage: service_limits.sh ECHOFLOW
set -u
CLI=${1:?usage: service_limits.sh ECHOFLOW}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
MPIRUN=(timeout -k 10 120 mpirun --allow-run-as-root --bind-to none
    --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_limits.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }

# shellcheck source=tests/mpi_kill.sh
. "$HERE/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# ---- a stopped worker --------------------------------------------------------
# rank 2 (a worker, not the dispatcher) is stopped 5 s in (once every
# rank has joined, even under a sanitizer: a rank stopped before that
# holds the others in the join's collectives, which no timeout covers);
# the trainer must fail within its 2 s timeout (and the job end) well
# before kill_rank gives up after 30 s
"${MPIRUN[@]}" -np 1 "$CLI" run 'service:epochs=0,liveness=2' : \
    -np 2 "$CLI" serve 'range:n=100000000,bytes=1000' --splits 2 \
    --throttle 2000 >"$TMP/stop.out" 2>"$TMP/stop.err" &
KILL_AFTER=5 kill_rank $! 2 STOP
[ -n "$victim" ] && kill -9 "$victim" 2>/dev/null # if still there
want="echoflow run: service: rank 2 (a worker) sent nothing for 2 s (liveness timeout, option service:liveness)"
if [ "$killed" != ended ]; then
    fail "stopped worker: the job $killed: $(cat "$TMP/stop.err")"
elif [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
    grep -qF "$want" "$TMP/stop.err" &&
    "$PY" -c "import sys; sys.exit(float('$took') > 15)"; then
    pass "a stopped worker ends the job (rc $rc) in $took s, named"
else
    fail "stopped worker: rc $rc in $took s: $(cat "$TMP/stop.err")"
fi

# ---- samples larger than a message's room, under a budget ------------------------
# 64M over 2 workers and 4 credits gives a message 8M of room: each 30 MB
# sample goes alone, and the consumer (2 a second) is slower than the
# workers, whose credits alone would let 8 of them (240 MB) in
# rss_run NAME BYTES: runs the job with samples of BYTES; prints the
# trainer's peak RSS in kB
rss_run() {
    "${MPIRUN[@]}" -np 1 /usr/bin/time -f "peak_rss_kb %M" -o "$TMP/$1.rss" \
        "$CLI" run 'service | throttle:rate=2' --memory-budget 64M --json : \
        -np 2 "$CLI" serve "range:n=16,bytes=$2" --splits 2 \
        >"$TMP/$1.out" 2>"$TMP/$1.err"
}
rss_run small 1000
rc_small=$?
rss_run big 30000000
rc=$?
if [ "$rc_small" -eq 0 ] && [ "$rc" -eq 0 ] &&
    "$PY" - "$TMP" <<'PY'; then
import json, os, sys
tmp = sys.argv[1]
def rss(name):
    return int(open("%s/%s.rss" % (tmp, name)).read().split()[-1]) * 1024
d = json.load(open(tmp + "/big.out"))
budget = 64 << 20
assert d["items"] == 16, d["items"]
# the budget counted the received messages, and gave them all back
assert 30000000 <= d["peak_bytes_held"] <= budget + 30000064, d
assert d["bytes_held"] == 0, d
grew = rss("big") - rss("small")
# a sanitizer's allocator keeps freed memory (ASan's quarantine): there
# the budget's figures are the check
assert os.environ.get("EF_SANITIZED") or grew <= budget + 2 * 30000000, \
    "peak RSS grew by %d MB" % (grew >> 20)
print("peak RSS %d MB over small samples; budget held %d MB at most" %
      (grew >> 20, d["peak_bytes_held"] >> 20))
PY
    pass "30 MB samples under a 64M budget stay within it"
else
    fail "budget: rc $rc_small/$rc: $(cat "$TMP/small.err" "$TMP/big.err")"
fi

# ---- a sample over the trainer's whole budget ------------------------------------
# a credit lets one sample take the trainer's budget at most: the worker
# fails its split saying so, and the trainer with it
"${MPIRUN[@]}" -np 1 "$CLI" run service --memory-budget 16M : \
    -np 1 "$CLI" serve "range:n=4,bytes=30000000" --splits 1 \
    >"$TMP/over.out" 2>"$TMP/over.err"
rc=$?
want="echoflow serve, rank 1 (a worker), split 0 of 1 in epoch 0: service: item 0: 30000016 bytes, over the memory budget of every trainer (one sample may take 16777216 bytes at most"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
    grep -qF "echoflow run: $want" "$TMP/over.err"; then
    pass "a sample over the trainer's budget fails the job (rc $rc), saying so"
else
    fail "sample over the budget: rc $rc: $(cat "$TMP/over.err")"
fi

echo "$failures failed"
[ "$failures" -eq 0 ]
