#!/usr/bin/env bash
# `echoflow train --checkpoint`: a run killed with SIGKILL at random
# moments and resumed with --resume each time, until it completes, ends
# exactly as the uninterrupted run: the same steps, fresh examples,
# samples trained on (their hash) and final weights (their hash). And
# checkpoints that are truncated, corrupt or of another run are refused
# with a message naming the file and what differs, and left as they were.
#
# Each kill waits for the run to write a new checkpoint, then a random
# 0-250 ms, so every kill lands in training (sometimes inside a save)
# however fast or loaded the machine is; nothing here is timed.
#
# usage: resume_test.sh ECHOFLOW_BINARY FASHION_MNIST_DIR
set -u

CLI=${1:?usage: resume_test.sh ECHOFLOW_BINARY FASHION_MNIST_DIR}
FMNIST=${2:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_resume.XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
pass() {
    echo "ok: $*"
}

if ! "$CLI" train --help >/dev/null 2>&1; then
    echo "skip: this echoflow has no trainer (OpenBLAS missing)"
    exit 0
fi
TRAIN_IMG="$FMNIST/train-images-idx3-ubyte.gz"
TRAIN_LAB="$FMNIST/train-labels-idx1-ubyte.gz"
TEST_IMG="$FMNIST/t10k-images-idx3-ubyte.gz"
TEST_LAB="$FMNIST/t10k-labels-idx1-ubyte.gz"
for f in "$TRAIN_IMG" "$TRAIN_LAB" "$TEST_IMG" "$TEST_LAB"; do
    if [ ! -r "$f" ]; then
        echo "FAIL: Fashion-MNIST is missing under $FMNIST:" \
            "apt-get install dataset-fashion-mnist" >&2
        exit 1
    fi
done

# The preset's pipeline shape, with a shuffle, example echoing with its
# own shuffle buffer, and a prefetch thread: everything a checkpoint has
# to bring back. 60,000 fresh examples at factor 2 are 938 steps.
spec() {
    echo "idx:images=$TRAIN_IMG,labels=$TRAIN_LAB | shuffle:20000 | repeat |" \
        "echo:factor=$1,shuffle=500 | batch:128 | prefetch:4"
}
TEST_SPEC="idx:images=$TEST_IMG,labels=$TEST_LAB | batch:1000"
OPTS=(--threads 1 --max-fresh 60000 --eval-every 20000 --seed 7)
ARGS=("${OPTS[@]}" --json)

# train NAME ARGS...: a run in the foreground; stdout to $TMP/NAME.out,
# stderr to $TMP/NAME.err, exit status in $rc.
train() {
    local name=$1
    shift
    timeout 300 "$CLI" train "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
}

# The figures that must agree, one a line, from a run's JSON.
figures() {
    "$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("steps", "fresh", "examples", "samples_hash", "weights_hash",
          "final_accuracy", "final_loss", "reached", "diverged"):
    print(k, d[k])
EOF
}

# ---- the uninterrupted run ------------------------------------------------
train ref --spec "$(spec 2)" --test-spec "$TEST_SPEC" "${ARGS[@]}"
if [ "$rc" -ne 0 ] || ! figures "$TMP/ref.out" >"$TMP/ref.fig"; then
    echo "FAIL: the uninterrupted run: rc $rc, $(cat "$TMP/ref.err")" >&2
    exit 1
fi
pass "uninterrupted: $(tr '\n' ' ' <"$TMP/ref.fig")"

# ---- killed ten times, resumed each time -----------------------------------
CK="$TMP/run.ck"
CKTEXT=(--spec "$(spec 2)" --test-spec "$TEST_SPEC" "${OPTS[@]}"
        --checkpoint "$CK" --checkpoint-every 20 --resume)
CKARGS=("${CKTEXT[@]}" --json)
# the identity of the checkpoint file now: each save is a new file
# renamed over the old one
ck_id() { stat -c '%i %y %s' "$CK" 2>/dev/null || echo none; }

kills=0
done_early=0
resumed_at=() # the step each attempt resumed from, from its stderr
for attempt in $(seq 1 10); do
    before=$(ck_id)
    # without --json, so that it says where it resumed
    "$CLI" train "${CKTEXT[@]}" >"$TMP/attempt.out" \
        2>"$TMP/attempt.err" &
    pid=$!
    # wait for a new checkpoint (or the end of the run)
    while kill -0 "$pid" 2>/dev/null && [ "$(ck_id)" = "$before" ]; do
        sleep 0.02
    done
    sleep "0.$(printf '%03d' $((RANDOM % 250)))"
    kill -9 "$pid" 2>/dev/null
    { wait "$pid"; } 2>/dev/null # no "Killed" line from the shell
    st=$?
    pid=
    step=$(sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/attempt.err")
    resumed_at+=("${step:-none}")
    if [ "$st" -eq 137 ]; then
        kills=$((kills + 1))
    elif [ "$st" -eq 0 ]; then
        done_early=1 # it finished before the kill: nothing left to kill
        break
    else
        fail "attempt $attempt exited $st: $(cat "$TMP/attempt.err")"
        break
    fi
done
if [ -e "$CK.tmp" ]; then
    echo "note: a kill landed inside a save ($CK.tmp left behind)"
fi
# the remaining part, uninterrupted
train final "${CKARGS[@]}"
if [ "$rc" -ne 0 ]; then
    fail "the last resume: rc $rc, $(cat "$TMP/final.err")"
elif ! figures "$TMP/final.out" >"$TMP/final.fig"; then
    fail "the last resume printed no report: $(cat "$TMP/final.out")"
elif ! diff "$TMP/ref.fig" "$TMP/final.fig" >"$TMP/fig.diff"; then
    fail "killed $kills times and resumed, the run ends otherwise than" \
        "the uninterrupted one (< uninterrupted, > resumed):" \
        "$(cat "$TMP/fig.diff")"
else
    pass "killed $kills times and resumed (at steps ${resumed_at[*]}):" \
        "the same steps, samples and weights"
fi
# a kill lands once a new checkpoint was written, so every attempt after
# the first resumed from a later step than the one before it; enough of
# them must have happened to count
[ "$kills" -ge 5 ] ||
    fail "only $kills of 10 runs were killed before the run ended (done early: $done_early)"
prev=-1
for ((i = 1; i < ${#resumed_at[@]}; i++)); do
    step=${resumed_at[$i]}
    if [ "$step" = none ] || [ "$step" -le "$prev" ]; then
        fail "attempt $((i + 1)) resumed at step $step, after $prev" \
            "(all: ${resumed_at[*]})"
        break
    fi
    prev=$step
done
[ "${resumed_at[0]}" = none ] ||
    fail "the first attempt resumed (at ${resumed_at[0]}) from no checkpoint"
# once finished, resuming again trains nothing and reports the same
train again "${CKARGS[@]}"
if [ "$rc" -eq 0 ] && figures "$TMP/again.out" >"$TMP/again.fig" &&
    diff -q "$TMP/ref.fig" "$TMP/again.fig" >/dev/null &&
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["checkpoints"] != 0 or d["resumed_at_step"] != d["steps"])' "$TMP/again.out"; then
    pass "resuming a finished run reports it again and trains no further"
else
    fail "resuming a finished run: rc $rc, $(cat "$TMP/again.out" "$TMP/again.err")"
fi

# ---- bad checkpoints -----------------------------------------------------
GOOD="$TMP/good.ck"
cp "$CK" "$GOOD"
size=$(stat -c %s "$GOOD")

# refused NAME FILE MESSAGE... ARGS: a resume from FILE (a copy of it, so
# the original is kept to compare) exits 1 with each MESSAGE on stderr,
# the file's name among them, and leaves the file as it was.
refused() {
    local name=$1 file=$2
    shift 2
    local msgs=()
    while [ "$1" != "--" ]; do
        msgs+=("$1")
        shift
    done
    shift
    cp "$file" "$TMP/$name.ck"
    train "$name" "$@" --checkpoint "$TMP/$name.ck" --resume
    local ok=1
    [ "$rc" -eq 1 ] || ok=0
    grep -qF "$TMP/$name.ck" "$TMP/$name.err" || ok=0
    for m in "${msgs[@]}"; do
        grep -qF -- "$m" "$TMP/$name.err" || ok=0
    done
    cmp -s "$file" "$TMP/$name.ck" || ok=0
    if [ "$ok" -eq 1 ]; then
        pass "$name refused: $(head -n 1 "$TMP/$name.err")"
    else
        fail "$name: rc $rc (expected 1 with ${msgs[*]}), stderr: $(cat "$TMP/$name.err")"
    fi
}
SAME=(--spec "$(spec 2)" --test-spec "$TEST_SPEC" "${ARGS[@]}")

head -c $((size / 2)) "$GOOD" >"$TMP/half"
refused truncated "$TMP/half" "truncated" -- "${SAME[@]}"
head -c $((size - 1)) "$GOOD" >"$TMP/short"
refused truncated_by_one "$TMP/short" "truncated" -- "${SAME[@]}"
head -c 10 "$GOOD" >"$TMP/tiny"
refused truncated_header "$TMP/tiny" "truncated" -- "${SAME[@]}"
"$PY" - "$GOOD" "$TMP/flipped" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 3] ^= 0x10  # a bit in the weights
open(sys.argv[2], "wb").write(b)
EOF
refused corrupt "$TMP/flipped" "corrupt" "checksum" -- "${SAME[@]}"
echo "not a checkpoint" >"$TMP/text"
refused not_a_checkpoint "$TMP/text" "not a checkpoint" -- "${SAME[@]}"
# another pipeline (echo factor 3), another model, another learning rate
refused other_spec "$GOOD" "another training pipeline" "echo" "factor=3" -- \
    --spec "$(spec 3)" --test-spec "$TEST_SPEC" "${ARGS[@]}"
refused other_model "$GOOD" "model mlp there, cnn here" -- \
    "${SAME[@]}" --model cnn
refused other_lr "$GOOD" "lr 0.03 there, 0.05 here" -- \
    "${SAME[@]}" --lr 0.05
refused other_test_set "$GOOD" "held-out set" -- \
    --spec "$(spec 2)" --test-spec "$TEST_SPEC | take:5" "${ARGS[@]}"

# an existing checkpoint is not overwritten without --resume
cp "$GOOD" "$TMP/kept.ck"
train kept "${SAME[@]}" --checkpoint "$TMP/kept.ck"
if [ "$rc" -eq 2 ] && grep -q "exists: give --resume" "$TMP/kept.err" &&
    cmp -s "$GOOD" "$TMP/kept.ck"; then
    pass "an existing checkpoint without --resume is refused and kept"
else
    fail "existing checkpoint without --resume: rc $rc, $(cat "$TMP/kept.err")"
fi
for bad in "--resume" "--checkpoint-every 5"; do
    # shellcheck disable=SC2086
    train lone "${SAME[@]}" $bad
    [ "$rc" -eq 2 ] && grep -q "needs --checkpoint" "$TMP/lone.err" ||
        fail "$bad without --checkpoint: rc $rc, $(cat "$TMP/lone.err")"
done

[ "$failures" -eq 0 ] || {
    echo "$failures failure(s)" >&2
    exit 1
}
echo "all resume tests passed"
