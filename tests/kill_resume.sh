# SPDX-License-Identifier: Apache-2.0
# Sourced by resume_test.sh and http_integration.sh: an `echoflow train
# --checkpoint` run killed with SIGKILL at ten moments and resumed with
# --resume each time, until it completes, must end exactly as the
# uninterrupted run: the same steps, fresh examples, samples trained on
# (their hash) and final weights (their hash).
#
# Each kill waits for the run to write a new checkpoint, then a random
# 0-250 ms, so every kill lands in training (sometimes inside a save)
# however fast or loaded the machine is; nothing here is timed.
#
# The sourcing script sets CLI, PY and TMP, defines fail and pass, and
# kills "$pid" in its EXIT trap when it is set (the run in the background).

# train NAME ARGS...: a run in the foreground; stdout to $TMP/NAME.out,
# stderr to $TMP/NAME.err, exit status in $rc.
train() {
    local name=$1
    shift
    timeout 300 "$CLI" train "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
}

# figures FILE: the figures that must agree, one a line, from a run's JSON.
figures() {
    "$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("steps", "fresh", "examples", "samples_hash", "weights_hash",
          "final_accuracy", "final_loss", "reached", "diverged"):
    print(k, d[k])
EOF
}

# the identity of checkpoint file $1 now: each save is a new file renamed
# over the old one
ck_id() { stat -c '%i %y %s' "$1" 2>/dev/null || echo none; }

# kill_and_resume REF_FIG CK ARGS...: `echoflow train ARGS` (which give
# --checkpoint CK --resume, and not --json) run ten times, each killed
# once it wrote a new checkpoint, then once more to its end, with --json;
# passes when that end's figures equal REF_FIG (figures of the
# uninterrupted run), at least 5 runs were killed, the first started
# afresh and each other resumed from a later step than the one before.
# After each run, when the caller defines a function after_attempt, it is
# called with the attempt's number (final for the last). Sets kills and
# resumed_at (the step each run before the last resumed from, or none).
kill_and_resume() {
    local ref=$1 ck=$2
    shift 2
    local before st step attempt done_early=0
    kills=0
    resumed_at=()
    for attempt in $(seq 1 10); do
        before=$(ck_id "$ck")
        # without --json, so that it says where it resumed
        "$CLI" train "$@" >"$TMP/attempt.out" 2>"$TMP/attempt.err" &
        pid=$!
        # wait for a new checkpoint (or the end of the run)
        while kill -0 "$pid" 2>/dev/null && [ "$(ck_id "$ck")" = "$before" ]; do
            sleep 0.02
        done
        sleep "0.$(printf '%03d' $((RANDOM % 250)))"
        kill -9 "$pid" 2>/dev/null
        { wait "$pid"; } 2>/dev/null # no "Killed" line from the shell
        st=$?
        pid=
        step=$(sed -n 's/^resuming from .*: step \([0-9]*\),.*/\1/p' "$TMP/attempt.err")
        resumed_at+=("${step:-none}")
        if declare -F after_attempt >/dev/null; then after_attempt "$attempt"; fi
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
    if [ -e "$ck.tmp" ]; then
        echo "note: a kill landed inside a save ($ck.tmp left behind)"
    fi
    # the remaining part, uninterrupted
    train final "$@" --json
    if declare -F after_attempt >/dev/null; then after_attempt final; fi
    if [ "$rc" -ne 0 ]; then
        fail "the last resume: rc $rc, $(cat "$TMP/final.err")"
    elif ! figures "$TMP/final.out" >"$TMP/final.fig"; then
        fail "the last resume printed no report: $(cat "$TMP/final.out")"
    elif ! diff "$ref" "$TMP/final.fig" >"$TMP/fig.diff"; then
        fail "killed $kills times and resumed, the run ends otherwise than" \
            "the uninterrupted one (< uninterrupted, > resumed):" \
            "$(cat "$TMP/fig.diff")"
    else
        pass "killed $kills times and resumed (at steps ${resumed_at[*]}):" \
            "the same steps, samples and weights"
    fi
    # a kill lands once a new checkpoint was written, so every attempt
    # after the first resumed from a later step than the one before it;
    # enough of them must have happened to count
    [ "$kills" -ge 5 ] ||
        fail "only $kills of 10 runs were killed before the run ended (done early: $done_early)"
    local i prev=-1
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
}
