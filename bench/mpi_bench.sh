#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data-parallel training under mpirun on this machine: examples/s of
# `echoflow train` for the MLP and the CNN with 1 and 2 processes, and the
# time each step spends in collectives (MPI_Allreduce of the gradients and
# of the step's counts).
#
#   bench/mpi_bench.sh [--quick] [path/to/echoflow]     (default build/echoflow)
#
# Settings, per model (Fashion-MNIST preset, evaluation off):
#   1 process, --threads 1 and --threads 2, batch 128;
#   2 processes (mpirun -np 2 --bind-to none), --threads 1 each, batch 64
#   each (the same 128 examples a step) and batch 128 each (256 a step).
# Each run trains a fixed number of fresh examples (MLP 200,000, CNN
# 12,800; a tenth with --quick); examples/s is the JSON's
# train_examples_per_s (all processes' examples over process 0's training
# time), comm ms/step its comm_ms_per_step. Prints a markdown table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quick=0
[ "${1:-}" = "--quick" ] && { quick=1; shift; }
cli=${1:-$here/../build/echoflow}
[ -x "$cli" ] || { echo "mpi_bench: build echoflow first ($cli)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpi_bench: apt-get install openmpi-bin" >&2; exit 1; }
py=/usr/bin/python3
mpirun=(mpirun --allow-run-as-root --bind-to none)

field() { "$py" -c 'import json,sys; d=json.load(sys.stdin); print(" | ".join(
    "%.0f" % d[k] if k == "train_examples_per_s" else "%.2f" % d.get(k, 0)
    for k in sys.argv[1:]))' "$@"; }

echo "commit $(git -C "$here" rev-parse --short HEAD), $(nproc) cores, $(date -u +%F)"
echo
echo "| model | processes | threads each | batch each | examples/s | comm ms/step |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for model in mlp cnn; do
    n=$([ "$model" = mlp ] && echo 200000 || echo 12800)
    [ "$quick" = 1 ] && n=$((n / 10))
    args=(train --data fashion-mnist --model "$model" --max-fresh "$n"
          --eval-every 100000000 --json)
    for t in 1 2; do
        r=$("$cli" "${args[@]}" --threads "$t" --batch 128 |
            field train_examples_per_s comm_ms_per_step)
        echo "| $model | 1 | $t | 128 | $r |"
    done
    for b in 64 128; do
        r=$("${mpirun[@]}" -np 2 "$cli" "${args[@]}" --threads 1 --batch "$b" |
            field train_examples_per_s comm_ms_per_step)
        echo "| $model | 2 | 1 | $b | $r |"
    done
done
