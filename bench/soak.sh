#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak test: Fashion-MNIST packed into 12 WebDataset shards, served by
# tests/http_server.py with random faults (503s, connections cut and
# stalled mid-body, again and again), read for DURATION by one Python
# process through echoflow (tar over HTTP | decode | repeat | throttle |
# echo:factor=auto). It fails when a sample is lost or duplicated in any
# completed epoch, anything is skipped or abandoned, or RSS or open file
# descriptors grow after the warm-up; bench/soak.py has the pipeline, the
# checks and the tolerances.
#
# usage: bench/soak.sh DURATION
#   DURATION  seconds (at least 60), or with a unit: 90s, 2m, 1h
#   bench/soak.sh 1h    the long run
#   bench/soak.sh 2m    the CI form (ctest -R soak in a developer build)
# environment:
#   EF_BUILD       build dir with the echoflow command and python/ (default:
#                  build under the repository root)
#   EF_SOAK_DIR    work dir, kept: the shards are packed there once and
#                  reused (default: a temporary dir, removed at the end)
#   EF_SOAK_SEED   seed of the pipeline and of the server's faults (default 1)
#   EF_SOAK_TRIES  HTTP tries per shard (default 10); 1 gives up a shard at
#                  its first fault, and the run must fail
#   EF_SOAK_PYTHON the interpreter the package was built for (default
#                  /usr/bin/python3)
# needs: dataset-fashion-mnist, libcurl and libspng in the build
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
py=${EF_SOAK_PYTHON:-/usr/bin/python3}
fail() { echo "soak: $1" >&2; exit "${2:-1}"; }

[ $# -eq 1 ] ||
    fail "usage: bench/soak.sh DURATION (seconds, or 90s, 2m, 1h)" 2
[[ $1 =~ ^([0-9]+)([smh]?)$ ]] ||
    fail "DURATION must be seconds or a number with s, m or h, not '$1'" 2
secs=${BASH_REMATCH[1]}
case ${BASH_REMATCH[2]} in
  m) secs=$((secs * 60)) ;;
  h) secs=$((secs * 3600)) ;;
esac
# below a minute the warm-up leaves too few samples, and no pass completes
[ "$secs" -ge 60 ] || fail "DURATION must be at least 60 s, not $1" 2

build=$(cd "${EF_BUILD:-$repo/build}" 2>/dev/null && pwd) ||
    fail "no build dir ${EF_BUILD:-$repo/build}: build first, or set EF_BUILD"
[ -x "$build/echoflow" ] || fail "build echoflow first ($build/echoflow)"
compgen -G "$build/python/echoflow/_echoflow*.so" >/dev/null ||
    fail "no Python package in $build/python"
export ECHOFLOW_CLI=$build/echoflow
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}

if [ -n "${EF_SOAK_DIR:-}" ]; then
  work=$EF_SOAK_DIR
  mkdir -p "$work"
  tmp=
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/ef_soak.XXXXXX")
  tmp=$work
fi
server=
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  [ -z "$tmp" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the server serves what is in shards/ when asked, so it may start before
# soak.py packs them; a fresh port file and fault counts per run.
# The fault mix: 15% of requests each get a 503, a cut or a stall (at a
# uniformly drawn body byte), 55% a clean reply: about one fault every 2
# seconds, and a shard still arrives in a few requests. soak.py gives each
# shard 10 tries without progress (15% to the 10th power: never), so that
# no shard is abandoned, and a 1 s timeout, so that a stall costs its
# reader a second while the other reader goes on.
mkdir -p "$work/shards"
rm -f "$work/port" "$work/faults.json"
seed=${EF_SOAK_SEED:-1}
"$py" "$repo/tests/http_server.py" --root "$work/shards" \
    --port-file "$work/port" --random-faults "$seed" --fault-rate 0.45 \
    --fault-counts "$work/faults.json" --quiet 2>"$work/server.err" &
server=$!
for _ in $(seq 100); do
  [ -s "$work/port" ] && break
  kill -0 "$server" 2>/dev/null ||
      fail "the server did not start: $(cat "$work/server.err")"
  sleep 0.1
done
[ -s "$work/port" ] || fail "the server wrote no port within 10 s"

rc=0
"$py" "$here/soak.py" --url "http://127.0.0.1:$(cat "$work/port")" \
    --work "$work" --duration "$secs" --seed "$seed" \
    --tries "${EF_SOAK_TRIES:-10}" --fault-counts "$work/faults.json" ||
    rc=$?
kill -0 "$server" 2>/dev/null ||
    { echo "soak: FAIL: the server died: $(cat "$work/server.err")"; rc=1; }
exit "$rc"
