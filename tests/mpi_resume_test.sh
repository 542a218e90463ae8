#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checkpoints of `echoflow train` under mpirun, two processes on this
# machine:
# - a run whose ranks are killed with SIGKILL (one rank, a random one, at
#   a random moment after a new checkpoint, mid-epoch; mpirun then ends
#   the other) and resumed with --resume each time ends exactly as the
#   uninterrupted run: the same model bytes (--save-model), steps, fresh
#   examples (the run's and each rank's), samples and weights. Shuffle and
#   a fixed-factor echo with its own shuffle buffer are on, and each
#   rank's data (3,000 records of its part) is read several times over;
# - checkpoints that cannot be resumed are refused, naming the file and
#   what differs, and left as they were: another number of processes,
#   one process's checkpoint, another seed, pipeline, data set or model,
#   another format version, a truncated file, a changed byte; and a rank
#   whose own part cannot be restored ends the job naming itself.
#
# usage: mpi_resume_test.sh ECHOFLOW FASHION_MNIST_DIR
set -u
CLI=${1:?usage: mpi_resume_test.sh ECHOFLOW FASHION_MNIST_DIR}
FMNIST=${2:?}
PY=/usr/bin/python3
MPIRUN=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_mpi_resume.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null ||
    { echo "FAIL: mpirun missing (apt-get install openmpi-bin)" >&2; exit 1; }

# shellcheck source=tests/mpi_kill.sh
. "$(dirname "$0")/mpi_kill.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# spec SET FACTOR: the training pipeline over Fashion-MNIST's SET (train
# or t10k), echoing FACTOR times
spec() {
    echo "idx:images=$FMNIST/$1-images-idx3-ubyte.gz,labels=$FMNIST/$1-labels-idx1-ubyte.gz |" \
        "take:3000 | shuffle:3000 | repeat | echo:factor=$2,shuffle=200 |" \
        "batch:32 | prefetch:4"
}
TEST="idx:images=$FMNIST/t10k-images-idx3-ubyte.gz,labels=$FMNIST/t10k-labels-idx1-ubyte.gz | take:2000 | batch:1000"
# 48,000 fresh examples: 1,500 steps, 8 passes over each rank's 3,000;
# under a sanitizer (EF_SANITIZED), where a step takes up to 100 times
# longer, 6,400: 200 steps, still past the first pass
FRESH=48000 EVERY=10 LIMIT=120
[ -n "${EF_SANITIZED:-}" ] && FRESH=6400 EVERY=5 LIMIT=500
OPTS=(--test-spec "$TEST" --threads 1 --max-fresh "$FRESH" --eval-every 16000
      --seed 7)

# run NAME NP ARGS...: `echoflow train ARGS` on NP processes (0: one, not
# under mpirun); stdout to $TMP/NAME.out, stderr to $TMP/NAME.err, exit
# status in $rc; `timeout` turns a hang into a failure.
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

# figures FILE: what must agree, one a line, from a run's JSON report
figures() {
    "$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("steps", "fresh", "examples", "samples_hash", "weights_hash",
          "final_accuracy", "final_loss", "processes"):
    print(k, d[k])
for r in d["ranks"]:
    print("rank", r["rank"], "fresh", r["fresh"], "batches", r["batches"])
EOF
}

# the identity of the checkpoint file now: each save is a new file

# ---- the uninterrupted run --------------------------------------------------
run ref 2 --spec "$(spec train 2)" "${OPTS[@]}" --json --save-model "$TMP/ref.model"
if [ "$rc" -ne 0 ] || ! figures "$TMP/ref.out" >"$TMP/ref.fig"; then
    echo "FAIL: the uninterrupted run: rc $rc, $(cat "$TMP/ref.err")" >&2
    exit 1
fi
pass "uninterrupted: $(tr '\n' ' ' <"$TMP/ref.fig")"

# ---- killed and resumed -------------------------------------------------------
CK="$TMP/run.ck"
CKARGS=(--spec "$(spec train 2)" "${OPTS[@]}" --checkpoint "$CK"
        --checkpoint-every "$EVERY" --resume)
kills=0
resumed_at=()
for attempt in 1 2 3 4; do
    before=$(ck_id "$CK")
    # without --json, so that process 0 says where it resumed
    timeout -k 10 "$LIMIT" "${MPIRUN[@]}" -np 2 "$CLI" train "${CKARGS[@]}" \
        >"$TMP/attempt.out" 2>"$TMP/attempt.err" &
    launcher=$!
    # a kill once a new checkpoint is there lands in training, whatever
    # the machine's speed; then a random 0-400 ms more
    while kill -0 "$launcher" 2>/dev/null && [ "$(ck_id "$CK")" = "$before" ]; do
        sleep 0.02
    done
    if ! kill -0 "$launcher" 2>/dev/null; then
        wait "$launcher" || fail "attempt $attempt: $(cat "$TMP/attempt.err")"
        break # it ended before a rank could be killed
    fi
    KILL_AFTER="0.$(printf '%03d' $((RANDOM % 400)))" \
        kill_rank "$launcher" $((RANDOM % 2))
    step=$(sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/attempt.err")
    resumed_at+=("${step:-none}")
    if [ "$killed" = ended ] && [ "$rc" -ne 0 ]; then
        kills=$((kills + 1))
    else
        fail "attempt $attempt: rank $killed, rc $rc: $(cat "$TMP/attempt.err")"
        break
    fi
done
run final 2 "${CKARGS[@]}" --json --save-model "$TMP/final.model"
if [ "$rc" -ne 0 ] || ! figures "$TMP/final.out" >"$TMP/final.fig"; then
    fail "the last resume: rc $rc, $(cat "$TMP/final.err")"
elif ! diff "$TMP/ref.fig" "$TMP/final.fig" >"$TMP/fig.diff"; then
    fail "killed $kills times and resumed, the run ends otherwise than the" \
        "uninterrupted one (< uninterrupted, > resumed): $(cat "$TMP/fig.diff")"
elif ! cmp -s "$TMP/ref.model" "$TMP/final.model"; then
    fail "killed $kills times and resumed: the saved model differs"
else
    pass "killed $kills times and resumed (at steps ${resumed_at[*]}):" \
        "the same model bytes, steps, fresh counts and samples"
fi
# not vacuous: kills happened, each run after the first resumed from a
# later step than the one before, and the last one from a checkpoint too
[ "$kills" -ge 3 ] || fail "only $kills of 4 runs were killed"
prev=-1
for ((i = 1; i < ${#resumed_at[@]}; i++)); do
    if [ "${resumed_at[$i]}" = none ] || [ "${resumed_at[$i]}" -le "$prev" ]; then
        fail "attempt $((i + 1)) resumed at step ${resumed_at[$i]}, after $prev" \
            "(all: ${resumed_at[*]})"
        break
    fi
    prev=${resumed_at[$i]}
done
[ "${resumed_at[0]:-none}" = none ] ||
    fail "the first attempt resumed (at ${resumed_at[0]}) from no checkpoint"
"$PY" - "$TMP/final.out" <<'EOF' ||
import json, sys
d = json.load(open(sys.argv[1]))
assert d["resumed_at_step"] is not None and 0 < d["resumed_at_step"] < d["steps"], d
assert d["checkpoints"] >= 1, d
print("ok: the last run resumed at step %d of %d" % (d["resumed_at_step"], d["steps"]))
EOF
    fail "the last run did not resume from a checkpoint mid-run: $(cat "$TMP/final.out")"

# ---- checkpoints that are refused --------------------------------------------
GOOD="$TMP/good.ck"
cp "$CK" "$GOOD"

# refused NAME NP FILE MESSAGE... -- ARGS: resuming from FILE (a copy, so
# the original is kept to compare) on NP processes fails with each
# MESSAGE on stderr, the copy's name among them, the copy left as it was
refused() {
    local name=$1 np=$2 file=$3
    shift 3
    local msgs=()
    while [ "$1" != "--" ]; do
        msgs+=("$1")
        shift
    done
    shift
    cp "$file" "$TMP/$name.ck"
    run "$name" "$np" "$@" --checkpoint "$TMP/$name.ck" --resume
    local ok=1
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || ok=0
    grep -qF "$TMP/$name.ck" "$TMP/$name.err" || ok=0
    for m in "${msgs[@]}"; do
        grep -qF -- "$m" "$TMP/$name.err" || ok=0
    done
    # a failure every process knows of ends in order, not by MPI_Abort
    ! grep -q "MPI_ABORT" "$TMP/$name.err" || ok=0
    cmp -s "$file" "$TMP/$name.ck" || ok=0
    if [ "$ok" -eq 1 ]; then
        pass "$name refused: $(grep -m 1 "^echoflow train: .*$TMP/$name.ck" "$TMP/$name.err")"
    else
        fail "$name: rc $rc (expected a failure with ${msgs[*]}), stderr: $(cat "$TMP/$name.err")"
    fi
}
SAME=(--spec "$(spec train 2)" "${OPTS[@]}")

refused three_ranks 3 "$GOOD" \
    "saved by a run of 2 partitions; this run has 3 partitions (--partitions, by default one per process)" \
    "rank 1: $TMP/three_ranks.ck: rank 0 could not read it" -- "${SAME[@]}"
refused one_process 0 "$GOOD" \
    "saved by a run of 2 partitions; this run has one process outside mpirun, one partition" \
    -- "${SAME[@]}"
refused other_seed 2 "$GOOD" "seed 7 there, 8 here" -- "${SAME[@]}" --seed 8
refused other_model 2 "$GOOD" "model mlp there, cnn here" -- "${SAME[@]}" --model cnn
# the pipeline and the data set: every process checks its own part
refused other_spec 2 "$GOOD" "rank 0: $TMP/other_spec.ck: saved from another training pipeline" \
    "rank 1: $TMP/other_spec.ck: saved from another training pipeline" \
    "'echo' differs" "factor=3" -- --spec "$(spec train 3)" "${OPTS[@]}"
refused other_data 2 "$GOOD" "saved from another training pipeline" \
    "'idx' differs" "t10k-images" -- --spec "$(spec t10k 2)" "${OPTS[@]}"
size=$(stat -c %s "$GOOD")
head -c $((size - 1)) "$GOOD" >"$TMP/short"
refused truncated 2 "$TMP/short" "truncated: $((size - 1)) bytes" -- "${SAME[@]}"
head -c $((size / 2)) "$GOOD" >"$TMP/half"
refused truncated_half 2 "$TMP/half" "truncated" -- "${SAME[@]}"

# the checkpoint's own bytes, changed: a flipped bit (CRC-32C no longer
# holds), another format version, and rank 1's part of the pipeline state
# changed with the file's CRC made to hold again (pure Python: no
# crc32c module is needed)
"$PY" - "$GOOD" "$TMP" <<'EOF'
import struct, sys

def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF

good = open(sys.argv[1], "rb").read()
out = sys.argv[2]
assert good[:8] == b"EFTCKPT\0"
version, ranks, payload = struct.unpack_from("<IIQ", good, 8)
assert (version, ranks) == (2, 2), (version, ranks)
assert len(good) == 24 + payload + 4

flipped = bytearray(good)
flipped[len(good) // 3] ^= 0x10  # a bit of the weights
open(out + "/flipped", "wb").write(flipped)

other = bytearray(good)
struct.pack_into("<I", other, 8, 3)
open(out + "/version3", "wb").write(other)

# walk to the parts: settings, 70 counters, the model
at = 24
(count,) = struct.unpack_from("<I", good, at)
at += 4
for _ in range(count):
    at += 1 + good[at]  # the name
    at += 1 + 8  # kind, value
at += 70 * 8
(tensors,) = struct.unpack_from("<I", good, at)
at += 4
for _ in range(tensors):
    (n,) = struct.unpack_from("<Q", good, at)
    at += 8 + 8 * n
parts = []
for _ in range(ranks):
    (n,) = struct.unpack_from("<Q", good, at)
    parts.append((at + 8, n))
    at += 8 + n
assert at == len(good) - 4, (at, len(good))
start, n = parts[1]
bad = bytearray(good)
bad[start + 40 + (n - 40) // 2] ^= 0x01  # inside rank 1's pipeline state
struct.pack_into("<I", bad, len(bad) - 4, crc32c(bytes(bad[:-4])))
open(out + "/rank1", "wb").write(bad)
EOF
refused corrupt 2 "$TMP/flipped" "corrupt: its checksum does not match" -- "${SAME[@]}"
refused version3 2 "$TMP/version3" "checkpoint format version 3; this build reads versions 1 and 2" \
    -- "${SAME[@]}"
refused rank1_state 2 "$TMP/rank1" \
    "rank 1: $TMP/rank1_state.ck: cannot restore the training pipeline's position: state:" \
    "rank 0: $TMP/rank1_state.ck: rank 1 could not restore its part of the checkpoint" \
    -- "${SAME[@]}"

# one process's checkpoint (format version 1) under mpirun
SHORT=(--spec "$(spec train 2)" "${OPTS[@]}" --max-fresh 640)
run single 0 "${SHORT[@]}" --checkpoint "$TMP/single.ck"
if [ "$rc" -eq 0 ]; then
    refused from_one_process 2 "$TMP/single.ck" \
        "saved by a run of one process outside mpirun, one partition; this run has 2 partitions" \
        -- "${SHORT[@]}"
else
    fail "one process's checkpoint: rc $rc, $(cat "$TMP/single.err")"
fi

echo "$failures failed"
[ "$failures" -eq 0 ]
