#!/usr/bin/env bash
# Decode benchmark: JPEG decode + random_resized_crop(224) + flip +
# normalize (+ CHW layout and batches of 32), images/s, echoflow against
# torchvision's transforms in a PyTorch DataLoader, measured in one run on
# the same JPEGs (about 500x375, quality 90, cut from the photographs of
# Debian's python3-skimage).
#
# usage: bench/decode_bench.sh [BUILD_DIR] [IMAGES_PER_SETTING]
# needs: scripts/install-deps.sh --bench (python3-torch, python3-torchvision,
# python3-pil, python3-skimage)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
n=${2:-3000}
cli=$build/echoflow
py=/usr/bin/python3
[ -x "$cli" ] || { echo "decode_bench: build echoflow first ($cli)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_decode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

photos=256
"$py" "$here/photos.py" "$tmp" "$photos"
reps=$(( (n + photos - 1) / photos ))

# echoflow: every map stage gets T threads; "1 thread" runs pinned to one
# core, so the pipeline's stages share it as one worker would
echoflow_rate() { # THREADS CPUS
    local t=$1 cpus=$2
    local spec="tar:urls=$tmp/photos-000000.tar | repeat:$reps | decode:threads=$t"
    spec+=" | random_resized_crop:size=224,threads=$t | flip:threads=$t"
    spec+=" | normalize:mean=\"0.485,0.456,0.406\",std=\"0.229,0.224,0.225\",threads=$t"
    spec+=" | to_chw:threads=$t | batch:32"
    taskset -c "$cpus" "$cli" run --json "$spec" |
        "$py" -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (32*d["items"]/d["elapsed_s"]))'
}

echo "images: $photos JPEGs of 500x375 (quality 90), $((reps * photos)) decoded per setting"
printf "%-44s %10s\n" "setting" "images/s"
printf "%-44s %10s\n" "echoflow, 1 thread per stage, 1 core" "$(echoflow_rate 1 0)"
printf "%-44s %10s\n" "echoflow, 2 threads per stage, 2 cores" "$(echoflow_rate 2 0,1)"
taskset -c 0 "$py" "$here/torch_decode.py" "$tmp/jpg" "$((reps * photos))" 0 |
    while read -r _ w _ rate; do
        printf "%-44s %10s\n" "PyTorch DataLoader, $w workers, 1 core" "$rate"
    done
taskset -c 0,1 "$py" "$here/torch_decode.py" "$tmp/jpg" "$((reps * photos))" 0 1 2 |
    while read -r _ w _ rate; do
        printf "%-44s %10s\n" "PyTorch DataLoader, $w workers, 2 cores" "$rate"
    done
