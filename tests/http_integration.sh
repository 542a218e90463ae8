#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Integration test over real HTTP: packs Fashion-MNIST into WebDataset
# shards with `echoflow pack`, serves them from nginx on loopback, reads
# them back with the tar source and decode, and checks every image and
# label byte-exact against the IDX files. Then again through a server that
# cuts the connection every 300 kB (tests/http_server.py): the stream
# resumes with Range requests, nothing lost, nothing duplicated. Also: a
# missing shard (404) fails with the URL, or is abandoned and counted; a
# server that goes down mid-shard: the shard is abandoned at the byte it
# stopped at, and the bytes left unread are counted. And a checkpoint:
# a tar pipeline saved mid-epoch resumes exactly, asking nginx for the
# shards it was reading with a Range from the saved offsets, and for no
# shard it had finished. And `echoflow train` on the shards, killed ten
# times and resumed, ends as the uninterrupted run (kill_resume.sh).
#
# usage: http_integration.sh ECHOFLOW ROUNDTRIP_CHECK FASHION_MNIST_DIR
#                            HTTP_SERVER_PY RESUME_CHECK
set -u
CLI=${1:?usage: http_integration.sh ECHOFLOW ROUNDTRIP_CHECK FMNIST_DIR SERVER_PY RESUME_CHECK}
CHECK=${2:?}
FMNIST=${3:?}
SERVER=${4:?}
RESUME=${5:?}
PY=/usr/bin/python3
NGINX=/usr/sbin/nginx
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_http.XXXXXX")
pids=()
pid= # a training run of kill_resume.sh
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/kill_resume.sh"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

IMG=$FMNIST/train-images-idx3-ubyte.gz
LAB=$FMNIST/train-labels-idx1-ubyte.gz
[ -r "$IMG" ] && [ -r "$LAB" ] || {
    echo "FAIL: Fashion-MNIST missing under $FMNIST (apt-get install dataset-fashion-mnist)" >&2
    exit 1
}
[ -x "$NGINX" ] || { echo "FAIL: $NGINX missing (apt-get install nginx)" >&2; exit 1; }

# ---- pack --------------------------------------------------------------
mkdir -p "$TMP/www"
if "$CLI" pack --per-shard 10000 "idx:images=$IMG,labels=$LAB" \
        "$TMP/www/train-%06d.tar" >"$TMP/pack.out" 2>"$TMP/pack.err"; then
    shards=$(tail -n 1 "$TMP/pack.out")
    [ "$shards" = "$TMP/www/train-{000000..000005}.tar" ] &&
        grep -q "packed 60000 samples into 6 shards" "$TMP/pack.out" &&
        pass "pack: 60000 samples, 6 shards" ||
        fail "pack printed: $(cat "$TMP/pack.out")"
else
    echo "FAIL: pack: $(cat "$TMP/pack.err")" >&2
    exit 1
fi
ls "$TMP/www" | grep -q partial && fail "pack left a .partial file"

# ---- nginx on a free loopback port, with its own config ------------------
free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start_nginx() {
    local port
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        mkdir -p "$TMP/nginx/tmp"
        cat >"$TMP/nginx/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 64; }
http {
    log_format ranges '\$request_method \$uri "\$http_range" \$status \$body_bytes_sent';
    access_log $TMP/nginx/access.log ranges;
    client_body_temp_path $TMP/nginx/tmp;
    proxy_temp_path $TMP/nginx/tmp;
    fastcgi_temp_path $TMP/nginx/tmp;
    uwsgi_temp_path $TMP/nginx/tmp;
    scgi_temp_path $TMP/nginx/tmp;
    server {
        listen 127.0.0.1:$port;
        root $TMP/www;
    }
}
CONF
        "$NGINX" -c "$TMP/nginx/nginx.conf" -p "$TMP/nginx" 2>>"$TMP/nginx/start.err" &
        local pid=$!
        for _ in $(seq 50); do
            if "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
                pids+=("$pid")
                NGINX_PORT=$port
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$pid" 2>/dev/null
    done
    cat "$TMP/nginx/start.err" "$TMP/nginx/error.log" >&2 2>/dev/null
    return 1
}
start_nginx || { echo "FAIL: nginx did not start" >&2; exit 1; }
URL="http://127.0.0.1:$NGINX_PORT"

if "$CHECK" "tar:urls=$URL/train-{000000..000005}.tar | decode" "$IMG" "$LAB" \
        >"$TMP/nginx.out" 2>&1; then
    pass "nginx: $(cat "$TMP/nginx.out")"
else
    fail "nginx round trip: $(cat "$TMP/nginx.out")"
fi

# ---- a checkpoint mid-epoch, resumed ---------------------------------------
# Two readers over four shards in list order: reader 0 reads shards 0 and
# 2, reader 1 shards 1 and 3, and the consumer takes from each in turn.
# After 6913 samples reader 0 gave 3457 of shard 0 and reader 1 3456 of
# shard 1, so the restore must ask for shard 0 from the end of its sample
# 3456 and for shard 1 from the end of its sample 3455, with Range
# requests, for shards 2 and 3 from their start, and for nothing else.
# The resumed items must be the whole run's after the 6913th, identity
# and bytes.
LOG=$TMP/nginx/access.log
# lines of the access log once nginx has logged every request so far
# (it logs a request when it ends, which may follow the client's exit)
settled_lines() {
    local n=-1 m
    for _ in $(seq 50); do
        m=$(wc -l <"$LOG")
        [ "$m" = "$n" ] && { echo "$m"; return; }
        n=$m
        sleep 0.2
    done
    echo "$n"
}
RSPEC="tar:urls=$URL/train-{000000..000003}.tar,cycle=2,shuffle_shards=false"
if "$RESUME" run "$RSPEC" >"$TMP/resume.all" 2>"$TMP/resume.err" &&
        "$RESUME" save "$RSPEC" 6913 "$TMP/resume.state" \
            >"$TMP/resume.head" 2>>"$TMP/resume.err"; then
    mark=$(settled_lines)
    if "$RESUME" restore "$RSPEC" "$TMP/resume.state" \
            >"$TMP/resume.tail" 2>>"$TMP/resume.err"; then
        sleep 0.2
        settled_lines >/dev/null
        tail -n +"$((mark + 1))" "$LOG" >"$TMP/resume.log"
        if "$PY" - "$TMP" <<'PY'; then
import os, sys, tarfile
tmp = sys.argv[1]
lines = lambda name: open(os.path.join(tmp, name)).read().splitlines()
whole, head, tail = lines("resume.all"), lines("resume.head"), lines("resume.tail")
assert len(whole) == 40000, len(whole)
assert len(head) == 6913, len(head)
assert head + tail == whole, "the resumed items differ from the whole run's"

def sample_end(path, n):
    # the offset after the last member of sample n (WebDataset grouping)
    keys, end = [], {}
    with tarfile.open(path) as t:
        for m in t:
            d, b = os.path.split(m.name)
            key = os.path.join(d, b.split(".", 1)[0])
            if not keys or keys[-1] != key:
                keys.append(key)
            end[len(keys) - 1] = m.offset_data + (m.size + 511) // 512 * 512
    return end[n]

www = os.path.join(tmp, "www")
want = {
    "/train-000000.tar": '"bytes=%d-"' % sample_end(os.path.join(www, "train-000000.tar"), 3456),
    "/train-000001.tar": '"bytes=%d-"' % sample_end(os.path.join(www, "train-000001.tar"), 3455),
    "/train-000002.tar": '"-"',
    "/train-000003.tar": '"-"',
}
got = {}
for line in lines("resume.log"):
    method, uri, rng, status, sent = line.split()
    assert uri not in got, "asked twice for %s: %s" % (uri, line)
    got[uri] = rng
    assert status == ("206" if rng != '"-"' else "200"), line
    size = os.path.getsize(os.path.join(www, uri[1:]))
    start = int(rng[7:-2]) if rng != '"-"' else 0
    assert 0 < int(sent) <= size - start, (line, size)
assert got == want, "requests after the restore: %s, expected %s" % (got, want)
print("%s and %s" % (want["/train-000000.tar"], want["/train-000001.tar"]))
PY
            pass "checkpoint over HTTP: 40000 items as in the whole run; the restore asked for shards 0 and 1 with Range from the saved offsets ($(tail -n 1 "$TMP/resume.err"))"
        else
            fail "checkpoint over HTTP: $(cat "$TMP/resume.log")"
        fi
    else
        fail "checkpoint restore: $(cat "$TMP/resume.err")"
    fi
else
    fail "checkpoint save: $(cat "$TMP/resume.err")"
fi

# ---- training killed and resumed, reading the shards over HTTP ------------
# `echoflow train --threads 1` on tar shards from nginx (shuffled, echoed
# with a shuffle, prefetched), killed with SIGKILL ten times and resumed
# (kill_resume.sh, as resume_test.sh does it with IDX files), ends as the
# uninterrupted run over HTTP: the same steps, fresh examples, samples and
# weights. Shards of 1000 samples, so that readers cross shards and resumes
# land at many places in them; the run stays in one pass of the 8 shards.
# nginx's log, run by run, shows how each resume read: each sample a
# restore made again was asked for by its own bytes ("bytes=A-B", exactly
# one sample), each reader went on from where the checkpoint left it
# ("bytes=N-", N the end of a sample past those it gave, at most once a
# reader, and in some resume at least), and no shard was asked for from
# its start in a run that read samples of it again.
hr_t0=$SECONDS
if ! "$CLI" train --help >/dev/null 2>&1; then
    echo "skip: training over HTTP: this echoflow has no trainer (OpenBLAS missing)"
elif ! "$CLI" pack --per-shard 1000 "idx:images=$IMG,labels=$LAB | take:8000" \
        "$TMP/www/small-%06d.tar" >"$TMP/small.out" 2>&1; then
    fail "pack small shards: $(cat "$TMP/small.out")"
else
    TEST_IMG=$FMNIST/t10k-images-idx3-ubyte.gz
    TEST_LAB=$FMNIST/t10k-labels-idx1-ubyte.gz
    HSPEC="tar:urls=$URL/small-{000000..000007}.tar,cycle=2 | decode:channels=1"
    HSPEC+=" | shuffle:200 | repeat | echo:factor=2,shuffle=100 | batch:128"
    HSPEC+=" | prefetch:2"
    HTRAIN=(--model cnn --threads 1 --max-fresh 4000 --eval-every 2000 --seed 7
        --spec "$HSPEC"
        --test-spec "idx:images=$TEST_IMG,labels=$TEST_LAB | take:2000 | batch:1000")
    hr_mark=$(settled_lines)
    # the requests of each run, once nginx logged them all
    after_attempt() {
        local now
        now=$(settled_lines)
        sed -n "$((hr_mark + 1)),${now}p" "$LOG" >"$TMP/hr.$1.log"
        hr_mark=$now
    }
    train ref "${HTRAIN[@]}" --json
    after_attempt ref
    if [ "$rc" -ne 0 ] || ! figures "$TMP/ref.out" >"$TMP/hr.ref.fig"; then
        fail "training over HTTP, uninterrupted: rc $rc, $(cat "$TMP/ref.err")"
    else
        kill_and_resume "$TMP/hr.ref.fig" "$TMP/hr.ck" "${HTRAIN[@]}" \
            --checkpoint "$TMP/hr.ck" --checkpoint-every 3 --resume
        if "$PY" - "$TMP" "${resumed_at[@]}" >"$TMP/hr.check" 2>&1 <<'PY'; then
import os, re, sys, tarfile
tmp, resumed_at = sys.argv[1], sys.argv[2:]
www = os.path.join(tmp, "www")

def samples(path):
    # (start, end) of each sample's bytes (WebDataset grouping)
    out, key = [], None
    with tarfile.open(path) as t:
        for m in t:
            d, b = os.path.split(m.name)
            k = os.path.join(d, b.split(".", 1)[0])
            end = m.offset_data + (m.size + 511) // 512 * 512
            if k != key:
                out.append([m.offset, end])
                key = k
            out[-1][1] = end
    return out

spans = {"/" + f: samples(os.path.join(www, f))
         for f in os.listdir(www) if f.startswith("small-")}
ends = {u: {b for _, b in s} for u, s in spans.items()}
whole = {u: {(a, b) for a, b in s} for u, s in spans.items()}
runs = ["ref"] + [str(i + 1) for i in range(len(resumed_at))] + ["final"]
resumed = {"ref": False, "final": True}
resumed.update({str(i + 1): s != "none" for i, s in enumerate(resumed_at)})
went_on, fetched_n = [], 0
for run in runs:
    fresh, fetched, last_fetched, went = set(), set(), {}, {}
    for line in open(os.path.join(tmp, "hr.%s.log" % run)):
        method, uri, rng, status, sent = line.split()
        assert uri in spans, line
        if rng == '"-"':
            assert status == "200", (run, line)
            fresh.add(uri)
            continue
        assert status == "206", (run, line)
        m = re.fullmatch(r'"bytes=(\d+)-(\d*)"', rng)
        assert m, (run, line)
        a = int(m.group(1))
        assert resumed[run], "run %s did not resume: %s" % (run, line)
        if m.group(2):  # a sample made again: its bytes, no more
            assert (a, int(m.group(2)) + 1) in whole[uri], (run, line)
            fetched.add(uri)
            last_fetched[uri] = max(a, last_fetched.get(uri, 0))
            fetched_n += 1
        else:  # a reader going on after the sample it gave last
            assert a in ends[uri] and uri not in went, (run, line)
            went[uri] = a
            went_on.append((run, uri, a))
    # each of the two readers goes on once, past the samples it gave
    assert len(went) <= 2, "run %s: %s" % (run, went)
    for uri, a in went.items():
        assert last_fetched.get(uri, 0) < a, (run, uri, a, last_fetched)
    again = fresh & fetched
    assert not again, "run %s read %s from the start, and samples of it " \
        "again with Range requests" % (run, sorted(again))
assert went_on, "no resume asked for a shard from part way (bytes=N-)"
print("%d readers went on from part way (first: run %s, %s from byte %d); "
      "%d samples read again by their bytes" % ((len(went_on),) + went_on[0]
                                                 + (fetched_n,)))
PY
            pass "training over HTTP killed and resumed: $(tail -n 1 "$TMP/hr.check") ($((SECONDS - hr_t0)) s)"
        else
            fail "training over HTTP, the requests: $(cat "$TMP/hr.check")"
        fi
    fi
fi

# a shard that is not there: the error names the URL and the status
"$CLI" run "tar:urls=$URL/train-{000004..000006}.tar | decode" \
    >"$TMP/404.out" 2>"$TMP/404.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "train-000006.tar" "$TMP/404.err" &&
        grep -q "404" "$TMP/404.err"; then
    pass "404 fails, naming the URL and the status"
else
    fail "404: rc $rc, stderr: $(cat "$TMP/404.err")"
fi
# ... or, under --on-error skip, is counted and the other shards are read
"$CLI" run --json --on-error skip "tar:urls=$URL/train-{000004..000006}.tar | decode" \
    >"$TMP/skip.out" 2>"$TMP/skip.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/skip.out" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["items"] == 20000, d["items"]
assert d["skipped"] == 0, d["skipped"]
assert d["abandoned"] == 1, d["abandoned"]
assert "train-000006.tar" in d["first_abandon"], d["first_abandon"]
assert "shard abandoned at byte 0" in d["first_abandon"], d["first_abandon"]
PY
    pass "404 under --on-error skip: 20000 samples, 1 shard abandoned"
else
    fail "404 skip: rc $rc, $(cat "$TMP/skip.out" "$TMP/skip.err")"
fi

# ---- a server that cuts every connection after 300 kB ----------------------
"$PY" "$SERVER" --root "$TMP/www" --port 0 --port-file "$TMP/cut.port" \
    --cut-every 300000 2>"$TMP/cut.err" &
pids+=("$!")
for _ in $(seq 100); do [ -s "$TMP/cut.port" ] && break; sleep 0.1; done
[ -s "$TMP/cut.port" ] || { echo "FAIL: http_server.py did not start: $(cat "$TMP/cut.err")" >&2; exit 1; }
CUT="http://127.0.0.1:$(cat "$TMP/cut.port")"
# each shard (about 25 MB) is cut about 80 times: at least 6 * 50 retries
if "$CHECK" "tar:urls=$CUT/train-{000000..000005}.tar,cycle=2 | decode" \
        "$IMG" "$LAB" 300 >"$TMP/cut.out" 2>&1; then
    pass "cut connections: $(cat "$TMP/cut.out")"
else
    fail "cut connections round trip: $(cat "$TMP/cut.out")"
fi

# ---- a server that goes down 1 MB into each file ------------------------------
"$PY" "$SERVER" --root "$TMP/www" --port 0 --port-file "$TMP/down.port" \
    --cut-first 1000000 --fail-from 1 --quiet 2>"$TMP/down.err" &
pids+=("$!")
for _ in $(seq 100); do [ -s "$TMP/down.port" ] && break; sleep 0.1; done
DOWN="http://127.0.0.1:$(cat "$TMP/down.port")"
size=$(stat -c %s "$TMP/www/train-000000.tar")
"$CLI" run --json --on-error skip \
    "tar:urls=$DOWN/train-000000.tar,tries=2,timeout=5" \
    >"$TMP/down.out" 2>"$TMP/down.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/down.out" "$size" <<'PY'; then
import json, sys
d, size = json.load(open(sys.argv[1])), int(sys.argv[2])
assert 0 < d["items"] < 10000, d["items"]
assert d["skipped"] == 0, d["skipped"]
assert d["abandoned"] == 1, d["abandoned"]
assert d["lost_bytes"] == size - 1000000, (d["lost_bytes"], size)
want = "shard abandoned at byte 1000000 of %d" % size
assert want in d["first_abandon"], d["first_abandon"]
PY
    pass "server down mid-shard: abandoned at byte 1000000, the rest counted lost"
else
    fail "server down mid-shard: rc $rc, $(cat "$TMP/down.out" "$TMP/down.err")"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "all HTTP integration checks passed"
