#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The size and time of `echoflow train --checkpoint` with 1 process
# outside mpirun and with 1, 2 and 3 processes under it: the checkpoint's
# bytes, the part of them that is pipeline state per process, the time of
# one checkpoint (the JSON's checkpoint_time_s over its checkpoints:
# every process's state saved, gathered to process 0 and the file written
# and fsync'd; process 0's clock) and of a resume (resume_time_s: read,
# dealt to every process, pipelines restored).
#
#   bench/mpi_checkpoint_bench.sh [--quick] [path/to/echoflow]
#
# Settings: the Fashion-MNIST preset with --echo factor=2,shuffle=1000
# (each process: its part of the training set behind shuffle:60000, an
# echo buffer of 1000, a prefetch of 4), --threads 1, the MLP, 64,000
# fresh examples (6,400 with --quick), a checkpoint every 50 steps. The
# resume is of the finished run: it restores the last checkpoint, taken
# at the end of the run. Prints a markdown table; then a second one of
# the same run read as 6 partitions (--partitions 6), saved on 1, 2 and 3
# processes and each checkpoint resumed on 1, 2 and 3 (elastic resume:
# the partitions' parts dealt to the processes that host them now).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quick=0
[ "${1:-}" = "--quick" ] && { quick=1; shift; }
cli=${1:-$here/../build/echoflow}
[ -x "$cli" ] || { echo "mpi_checkpoint_bench: build echoflow first ($cli)" >&2; exit 1; }
command -v mpirun >/dev/null ||
    { echo "mpi_checkpoint_bench: apt-get install openmpi-bin" >&2; exit 1; }
py=/usr/bin/python3
mpirun=(mpirun --allow-run-as-root --bind-to none --oversubscribe)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_ckbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fresh=$([ "$quick" = 1 ] && echo 6400 || echo 64000)
args=(train --data fashion-mnist --echo factor=2,shuffle=1000 --threads 1
      --max-fresh "$fresh" --eval-every 100000000 --checkpoint-every 50 --json)

# the KiB of the pipeline states in checkpoint $1, "a + b + ..."
states() {
    "$py" "$here/checkpoint_parts.py" "$1" |
        awk '{ printf "%s%.0f", (NR > 1 ? " + " : ""), $1 / 1024 }'
}

echo "commit $(git -C "$here" rev-parse --short HEAD), $(nproc) cores, $(date -u +%F)"
echo
echo "| processes | checkpoint | pipeline states (KiB, per process) | checkpoints | ms each | resume s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for np in 0 1 2 3; do
    ck="$tmp/run$np.ck"
    launch=()
    [ "$np" -gt 0 ] && launch=("${mpirun[@]}" -np "$np")
    "${launch[@]}" "$cli" "${args[@]}" --checkpoint "$ck" >"$tmp/run.json"
    "${launch[@]}" "$cli" "${args[@]}" --checkpoint "$ck" --resume >"$tmp/again.json"
    "$py" - "$tmp/run.json" "$tmp/again.json" "$np" "$(stat -c %s "$ck")" \
        "$(states "$ck")" <<'EOF'
import json, sys
run, again = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
np = int(sys.argv[3])
who = "1, outside mpirun" if np == 0 else "%d under mpirun" % np
print("| %s | %.2f MB | %s | %d | %.1f | %.2f |" % (
    who, int(sys.argv[4]) / 1e6, sys.argv[5], run["checkpoints"],
    1e3 * run["checkpoint_time_s"] / run["checkpoints"],
    again["resume_time_s"]))
EOF
done

echo
echo "| --partitions 6 saved on | checkpoint | pipeline states (KiB, per partition) | ms each | resumed on 1: s | on 2: s | on 3: s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for np in 0 2 3; do
    ck="$tmp/part$np.ck"
    launch=()
    [ "$np" -gt 0 ] && launch=("${mpirun[@]}" -np "$np")
    "${launch[@]}" "$cli" "${args[@]}" --partitions 6 --checkpoint "$ck" >"$tmp/run.json"
    resumes=()
    for on in 0 2 3; do
        cp "$ck" "$tmp/copy.ck"
        again=()
        [ "$on" -gt 0 ] && again=("${mpirun[@]}" -np "$on")
        "${again[@]}" "$cli" "${args[@]}" --partitions 6 --checkpoint "$tmp/copy.ck" \
            --resume >"$tmp/again$on.json"
        resumes+=("$tmp/again$on.json")
    done
    "$py" - "$tmp/run.json" "$np" "$(stat -c %s "$ck")" "$(states "$ck")" \
        "${resumes[@]}" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
np = int(sys.argv[2])
who = "1, outside mpirun" if np == 0 else "%d under mpirun" % np
again = [json.load(open(p))["resume_time_s"] for p in sys.argv[5:]]
print("| %s | %.2f MB | %s | %.1f | %.2f | %.2f | %.2f |" % (
    who, int(sys.argv[3]) / 1e6, sys.argv[4],
    1e3 * run["checkpoint_time_s"] / run["checkpoints"], *again))
EOF
done
