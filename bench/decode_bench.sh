#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Decode benchmark: JPEG decode + random_resized_crop(224) + flip +
# normalize (+ CHW layout and batches of 32), images/s, echoflow against
# torchvision's transforms in a PyTorch DataLoader, measured in one run on
# the same JPEGs (about 500x375, quality 90, cut from the photographs of
# Debian's python3-skimage). echoflow runs the work three ways: the
# separate stages; decode then crop_mirror_normalize (the four stages after
# decode in one pass); and decode_crop alone (only the crop's window
# decoded, then resampled, flipped and normalized in one pass). Plain
# full-image decoding is the yardstick for one core.
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

mean='mean="0.485,0.456,0.406",std="0.229,0.224,0.225"'
src="tar:urls=$tmp/photos-000000.tar | repeat:$reps"

# images/s of one echoflow spec, pinned to CPUS; batches count 32 images
echoflow_rate() { # CPUS SPEC
    taskset -c "$1" "$cli" run --json "$2" |
        "$py" -c 'import json,sys; d=json.load(sys.stdin); b=32 if "batch:32" in sys.argv[1] else 1; print("%.1f" % (b*d["items"]/d["elapsed_s"]))' "$2"
}
# the four stages after decode, each with T threads
separate() { # T
    local t=$1
    echo "$src | decode:threads=$t | random_resized_crop:size=224,threads=$t" \
        "| flip:threads=$t | normalize:$mean,threads=$t | to_chw:threads=$t" \
        "| batch:32"
}
# the same work in one stage: only the crop's window decoded, then
# resampled, flipped and normalized in one pass into the batch's buffer
fused() { # T
    echo "$src | decode_crop:size=224,mirror=0.5,$mean,threads=$1 | batch:32"
}
# full decode, then the other four stages' work in one pass
decode_cmn() { # T
    echo "$src | decode:threads=$1" \
        "| crop_mirror_normalize:size=224,$mean,threads=$1 | batch:32"
}

row() { printf "%-58s %10s\n" "$1" "$2"; }
echo "images: $photos JPEGs of 500x375 (quality 90), $((reps * photos)) decoded per setting"
echo "commit: $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
row "setting" "images/s"
plain1=$(echoflow_rate 0 "$src | decode"); row "echoflow, plain full-image decode only, 1 core" "$plain1"
fused1=$(echoflow_rate 0 "$(fused 1)"); row "echoflow, decode_crop (ROI, fused), 1 thread, 1 core" "$fused1"
row "echoflow, decode | crop_mirror_normalize, 1 thread each, 1 core" "$(echoflow_rate 0 "$(decode_cmn 1)")"
row "echoflow, separate stages, 1 thread per stage, 1 core" "$(echoflow_rate 0 "$(separate 1)")"
fused2=$(echoflow_rate 0,1 "$(fused 2)"); row "echoflow, decode_crop (ROI, fused), 2 threads, 2 cores" "$fused2"
row "echoflow, decode_crop (ROI, fused), threads=auto, 2 cores" "$(echoflow_rate 0,1 "$(fused auto)")"
row "echoflow, plain full-image decode only, 2 threads, 2 cores" "$(echoflow_rate 0,1 "$src | decode:threads=2")"
row "echoflow, separate stages, 2 threads per stage, 2 cores" "$(echoflow_rate 0,1 "$(separate 2)")"
taskset -c 0 "$py" "$here/torch_decode.py" "$tmp/jpg" "$((reps * photos))" 0 |
    while read -r _ w _ rate; do row "PyTorch DataLoader, $w workers, 1 core" "$rate"; done
best=0
while read -r _ w _ rate; do
    row "PyTorch DataLoader, $w workers, 2 cores" "$rate"
    best=$("$py" -c "print(max($best, $rate))")
done < <(taskset -c 0,1 "$py" "$here/torch_decode.py" "$tmp/jpg" "$((reps * photos))" 0 1 2)
"$py" -c "print('fused, 2 cores / PyTorch at its best on 2 cores: %.2fx' % ($fused2 / $best))"
"$py" -c "print('fused, 1 core / plain full-image decode, 1 core: %.2f' % ($fused1 / $plain1))"
