# SPDX-License-Identifier: Apache-2.0
# kill_rank LAUNCHER RANK [SIGNAL]: sends SIGNAL (default 9) to rank
# RANK of the mpirun job that LAUNCHER (mpirun, or a command such as
# `timeout` whose child is mpirun, started in the background) runs, once
# it has run KILL_AFTER seconds (default 2), and waits up to 30 s for
# LAUNCHER to end. Sets
# `killed`: "never started", "still going" (LAUNCHER then killed) or
# "ended"; `rc`: LAUNCHER's status once ended; `took`: seconds from the
# signal to the end; `victim`: the rank's process. Sourced by the MPI
# tests (mpi_test.sh, service_test.sh, service_limits.sh, and those of
# checkpoints, which use ck_id and checkpoints_replaced below too).
kill_rank() {
    local launcher=$1 rank=$2 signal=${3:-9} job="" pid t0
    victim=""
    for _ in $(seq 100); do
        # the job's own processes, mpirun's children: another suite on the
        # machine may be running the same command
        if [ "$(ps -o comm= -p "$launcher")" = mpirun ]; then
            job=$launcher
        else
            job=$(pgrep -P "$launcher" mpirun | head -1)
        fi
        for pid in $( [ -n "$job" ] && pgrep -P "$job"); do
            if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
                grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
                victim=$pid
            fi
        done
        [ -n "$victim" ] && break
        sleep 0.1
    done
    if [ -z "$victim" ]; then
        killed="never started"
        kill "$launcher" 2>/dev/null
        wait "$launcher"
        return
    fi
    sleep "${KILL_AFTER:-2}"
    kill -"$signal" "$victim"
    t0=$(date +%s.%N)
    for _ in $(seq 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    took=$(/usr/bin/python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")
    if kill -0 "$launcher" 2>/dev/null; then
        killed="still going"
        kill -9 "$launcher"
        wait "$launcher"
        return
    fi
    killed=ended
    wait "$launcher"
    rc=$?
}

# ck_id FILE: what changes when FILE is replaced (its inode, time and
# size), or "none".
ck_id() { stat -c '%i %y %s' "$1" 2>/dev/null || echo none; }

# checkpoints_replaced LAUNCHER FILE N: waits until FILE was replaced N
# times from now, or LAUNCHER ended.
checkpoints_replaced() {
    local launcher=$1 ck=$2 n before
    for ((n = 0; n < $3; n++)); do
        before=$(ck_id "$ck")
        while kill -0 "$launcher" 2>/dev/null && [ "$(ck_id "$ck")" = "$before" ]; do
            sleep 0.01
        done
    done
}
