#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Many small files over HTTP: items/s of the `files` source reading a list
# of URLs from tests/http_server.py, which waits LATENCY seconds before
# answering each request (a distant server), for each count of readers:
#   bench/files_readers.sh [build/echoflow] [N] [LATENCY] [READERS...]
# Defaults: 400 files of 2 KiB (about a Fashion-MNIST PNG's size), 10 ms
# per request, readers 1 2 4 8 16. One reader pays the latency once per
# file; R readers keep R requests in flight. Prints one line per count:
# readers, items, seconds, items/s (from `echoflow run --json`).
set -euo pipefail
bin=${1:-build/echoflow}
n=${2:-400}
latency=${3:-0.01}
shift $(($# < 3 ? $# : 3))
readers=("$@")
[ ${#readers[@]} -gt 0 ] || readers=(1 2 4 8 16)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_files_bench.XXXXXX")
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/www/img"
/usr/bin/python3 - "$tmp/www/img" "$n" <<'EOF'
import os, sys
for i in range(int(sys.argv[2])):
    with open(os.path.join(sys.argv[1], "%05d.png" % i), "wb") as f:
        f.write(os.urandom(2048))
EOF
/usr/bin/python3 "$here/../tests/http_server.py" --root "$tmp/www" \
    --port-file "$tmp/port" --latency "$latency" --quiet &
server=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port")
for ((i = 0; i < n; i++)); do
    printf 'http://127.0.0.1:%d/img/%05d.png\n' "$port" "$i"
done >"$tmp/list.txt"

echo "readers items seconds items/s  (n=$n, latency=${latency}s)"
for r in "${readers[@]}"; do
    "$bin" run --json "files:list=$tmp/list.txt,readers=$r" |
        /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%7s %5d %7.3f %8.0f" % (sys.argv[1], d["items"], d["elapsed_s"],
                               d["items"] / d["elapsed_s"]))' "$r"
done
