#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `echoflow train --checkpoint`: a run killed with SIGKILL at random
# moments and resumed with --resume each time, until it completes, ends
# exactly as the uninterrupted run: the same steps, fresh examples,
# samples trained on (their hash) and final weights (their hash). And
# checkpoints that are truncated, corrupt or of another run are refused
# with a message naming the file and what differs, and left as they were.
#
# The kills and resumes: kill_resume.sh, which http_integration.sh shares
# for the same run over HTTP.
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
. "$(dirname "${BASH_SOURCE[0]}")/kill_resume.sh"

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
kill_and_resume "$TMP/ref.fig" "$CK" "${CKTEXT[@]}"
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

# --checkpoint that is not a file to write: refused before training, not
# an empty name, a resume blocked for ever on a named pipe, or a failure
# at the first save
SHORT=(--data fashion-mnist --threads 1 --max-fresh 1280 --eval-every 1280)
mkfifo "$TMP/pipe.ck"
mkdir "$TMP/folder.ck"
for c in "|an empty one" "$TMP/pipe.ck|a named pipe" "$TMP/folder.ck|a folder"; do
    path=${c%%|*} want=${c#*|}
    train odd "${SHORT[@]}" --checkpoint "$path" --resume
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qF "$want" "$TMP/odd.err" &&
        ! grep -q "^fresh" "$TMP/odd.out" "$TMP/odd.err"; then
        pass "--checkpoint '$path' refused: $(head -n 1 "$TMP/odd.err")"
    else
        fail "--checkpoint '$path': rc $rc, $(cat "$TMP/odd.err")"
    fi
done

# a second run on a path another run checkpoints to is refused, naming
# the path, and writes nothing there (the first run's lock is held here
# by flock(1), as the running trainer holds it)
if command -v flock >/dev/null; then
    flock -o "$TMP/shared.ck.lock" timeout 300 "$CLI" train "${SHORT[@]}" \
        --checkpoint "$TMP/shared.ck" --resume \
        >"$TMP/two.out" 2>"$TMP/two.err"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
        grep -qF "$TMP/shared.ck: another run is checkpointing" "$TMP/two.err" &&
        [ ! -e "$TMP/shared.ck" ]; then
        pass "a second run on one checkpoint path refused: $(tail -n 1 "$TMP/two.err")"
    else
        fail "a second run on one checkpoint path: rc $rc, $(cat "$TMP/two.err")"
    fi
fi
# two runs started together: one checkpoints, the other is refused or
# comes after it; no temporary and no lock file is left
two=()
for i in 1 2; do
    timeout 300 "$CLI" train "${SHORT[@]}" --max-fresh 3840 \
        --checkpoint "$TMP/shared.ck" --checkpoint-every 1 --resume \
        >"$TMP/two$i.out" 2>"$TMP/two$i.err" &
    two+=($!)
done
ok=0
for i in 1 2; do
    if wait "${two[$((i - 1))]}"; then
        ok=$((ok + 1))
    elif ! grep -qF "another run is checkpointing" "$TMP/two$i.err"; then
        ok=-9
    fi
done
if [ "$ok" -ge 1 ] && [ -z "$(find "$TMP" -name 'shared.ck.tmp*')" ] &&
    [ ! -e "$TMP/shared.ck.lock" ]; then
    pass "two runs on one checkpoint path: $ok ended, the other refused"
else
    fail "two runs on one checkpoint: $(cat "$TMP/two1.err" "$TMP/two2.err")"
fi

# ---- an echo policy (policy=rank) ------------------------------------------
# The pool's values and priorities are in the checkpoint: a run killed and
# resumed ends as the uninterrupted one.
RANK=(--data fashion-mnist --echo factor=2,shuffle=100,policy=rank
      --threads 1 --max-fresh 25600 --eval-every 12800 --seed 7)
train rank_ref "${RANK[@]}" --json
if [ "$rc" -ne 0 ] || ! figures "$TMP/rank_ref.out" >"$TMP/rank_ref.fig"; then
    fail "the uninterrupted policy=rank run: rc $rc, $(cat "$TMP/rank_ref.err")"
else
    kill_and_resume "$TMP/rank_ref.fig" "$TMP/rank.ck" "${RANK[@]}" \
        --checkpoint "$TMP/rank.ck" --checkpoint-every 5 --resume
fi

[ "$failures" -eq 0 ] || {
    echo "$failures failure(s)" >&2
    exit 1
}
echo "all resume tests passed"
