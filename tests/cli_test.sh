#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests of the `echoflow` command.
# Usage: cli_test.sh PATH/TO/echoflow FASHION_MNIST_DIR
set -u

CLI=${1:?usage: cli_test.sh ECHOFLOW_BINARY FASHION_MNIST_DIR}
FMNIST=${2:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
pass() {
    echo "ok: $*"
}

# run NAME ARGS...: runs the CLI, stdout to $TMP/NAME.out, stderr to
# $TMP/NAME.err, exit status in $rc.
run() {
    local name=$1
    shift
    "$CLI" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
}

# expect_refused OPTION MESSAGE VALUE...: `run OPTION VALUE "range:n=3"`
# exits 2 with MESSAGE on stderr (a %s in it stands for the value), for
# each VALUE.
expect_refused() {
    local opt=$1 msg=$2 bad
    shift 2
    for bad in "$@"; do
        run refused run "$opt" "$bad" "range:n=3"
        if [ "$rc" -eq 2 ] && grep -qF -- "${msg//%s/$bad}" "$TMP/refused.err"; then
            pass "run $opt '$bad' refused"
        else
            fail "run $opt '$bad': rc $rc, $(cat "$TMP/refused.err")"
        fi
    done
}

# check_json NAME PYTHON_EXPR_FILE: runs the Python checks on $TMP/NAME.out.
check_json() {
    local name=$1 checks=$2
    if "$PY" - "$TMP/$name.out" <"$checks"; then
        pass "$name json"
    else
        fail "$name: json checks failed; stdout was:"
        sed 's/^/    /' "$TMP/$name.out" >&2
    fi
}

# Common JSON helpers, prepended to every check script.
cat >"$TMP/common.py" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
try:
    doc = json.loads(text)
except ValueError as e:
    sys.exit("stdout is not one JSON object: %s" % e)
if not isinstance(doc, dict):
    sys.exit("the JSON is not an object")

def need(cond, msg):
    if not cond:
        sys.exit(msg)

def figure(entry, key):
    # a stage figure, at the top of the entry or inside a nested object
    if key in entry:
        return entry[key]
    for v in entry.values():
        if isinstance(v, dict) and key in v:
            return v[key]
        if isinstance(v, list):
            for x in v:
                if isinstance(x, dict) and x.get("key") == key:
                    return x.get("value")
    sys.exit("stage %r has no figure %r: %r" % (entry.get("name"), key, entry))

for k in ("items", "elapsed_s", "consumer_wait_fraction", "stages"):
    need(k in doc, "missing key %r in %r" % (k, sorted(doc)))
need(isinstance(doc["stages"], list), "stages is not a list")
for st in doc["stages"]:
    need(isinstance(st, dict), "a stage entry is not an object")
    need("name" in st and "items_out" in st, "stage entry lacks name/items_out: %r" % st)
need(isinstance(doc["elapsed_s"], (int, float)) and doc["elapsed_s"] >= 0, "elapsed_s")
need(0 <= doc["consumer_wait_fraction"] <= 1.000001, "consumer_wait_fraction out of [0,1]")
names = [st["name"] for st in doc["stages"]]
def stage(name):
    need(name in names, "no stage %r in %r" % (name, names))
    return doc["stages"][names.index(name)]
EOF

# ---- echoflow stages ------------------------------------------------
run stages stages
if [ "$rc" -ne 0 ]; then
    fail "echoflow stages exited $rc: $(cat "$TMP/stages.err")"
else
    missing=""
    for s in range idx map shuffle echo batch prefetch repeat take throttle tar tfrecord cifar files; do
        grep -qw "$s" "$TMP/stages.out" || missing="$missing $s"
    done
    if [ -n "$missing" ]; then
        fail "echoflow stages does not list:$missing"
    else
        pass "stages lists every stage"
    fi
    # options are documented too
    for o in factor buffer size depth drop_remainder images labels urls files cycle; do
        grep -qw "$o" "$TMP/stages.out" || fail "echoflow stages does not mention option $o"
    done
fi

# ---- run --json on a synthetic pipeline -----------------------------
run range_json run --json "range:n=1000 | echo:2 | batch:128"
if [ "$rc" -ne 0 ]; then
    fail "run --json range exited $rc: $(cat "$TMP/range_json.err")"
else
    cat "$TMP/common.py" - >"$TMP/range.py" <<'EOF'
# 1000 items echoed twice = 2000 items, in batches of 128: 16 batches
need(doc["items"] == 16, "items = %r, expected 16 batches" % doc["items"])
need(names == ["range", "echo", "batch"], "stage names %r" % names)
need(stage("range")["items_out"] == 1000, "range items_out")
e = stage("echo")
need(e["items_out"] == 2000, "echo items_out = %r" % e["items_out"])
need(figure(e, "fresh") == 1000, "echo fresh = %r" % figure(e, "fresh"))
need(figure(e, "echoed") == 1000, "echo echoed = %r" % figure(e, "echoed"))
need(abs(figure(e, "effective_factor") - 2.0) < 1e-9, "effective_factor")
need(stage("batch")["items_out"] == 16, "batch items_out")
EOF
    check_json range_json "$TMP/range.py"
fi

# whitespace-free spec, seed and consume options
run seeded run --seed 7 --consume-us 10 --json "range:n=300|echo:1.5|batch:10"
if [ "$rc" -ne 0 ]; then
    fail "run --seed --consume-us exited $rc: $(cat "$TMP/seeded.err")"
else
    cat "$TMP/common.py" - >"$TMP/seeded.py" <<'EOF'
e = stage("echo")
need(figure(e, "fresh") == 300, "fresh")
need(e["items_out"] == 300 + figure(e, "echoed"), "echo items_out vs echoed")
need(doc["items"] == (e["items_out"] + 9) // 10, "items vs batches")
EOF
    check_json seeded "$TMP/seeded.py"
    # the same seed gives the same figures
    run seeded2 run --seed 7 --json "range:n=300|echo:1.5|batch:10"
    cat "$TMP/common.py" - >"$TMP/seeded2.py" <<EOF
other = json.load(open("$TMP/seeded.out"))
oe = [s for s in other["stages"] if s["name"] == "echo"][0]
need(figure(stage("echo"), "echoed") == figure(oe, "echoed"), "seed 7 twice: different echo counts")
EOF
    if [ "$rc" -ne 0 ]; then
        fail "run --seed 7 (second) exited $rc: $(cat "$TMP/seeded2.err")"
    else
        check_json seeded2 "$TMP/seeded2.py"
    fi
fi

# threads=auto and depth=auto: the chosen values in the JSON and the table
# (on the workers: a map running inline reads 0 threads, checked below)
run auto_json run --json "range:n=20000 | map:fn=to_f32,threads=auto,inline=never | map:fn=noop,threads=2,inline=never | prefetch:depth=auto"
if [ "$rc" -ne 0 ]; then
    fail "run with auto options exited $rc: $(cat "$TMP/auto_json.err")"
else
    cat "$TMP/common.py" - >"$TMP/auto.py" <<'EOF'
import os
cores = len(os.sched_getaffinity(0))
need(doc["items"] == 20000, "items = %r" % doc["items"])
maps = [s for s in doc["stages"] if s["name"] == "map"]
need(1 <= maps[0]["threads"] <= cores, "auto threads %r with %d cores" % (maps[0]["threads"], cores))
need(maps[1]["threads"] == 2, "threads=2 reads %r" % maps[1]["threads"])
d = stage("prefetch")["depth"]
need(2 <= d <= 1024, "depth=auto reads %r" % d)
need(stage("range")["threads"] == 0 and stage("range")["depth"] == 0, "range has threads or depth")
EOF
    check_json auto_json "$TMP/auto.py"
fi
run inline_json run --json "range:n=2000 | map:fn=noop,threads=2,inline=always"
if [ "$rc" -ne 0 ]; then
    fail "run with inline=always exited $rc: $(cat "$TMP/inline_json.err")"
else
    cat "$TMP/common.py" - >"$TMP/inline.py" <<'EOF'
need(doc["items"] == 2000, "items = %r" % doc["items"])
need(stage("map")["threads"] == 0, "inline map reads %r threads" % stage("map")["threads"])
EOF
    check_json inline_json "$TMP/inline.py"
fi
run auto_text run "range:n=1000 | map:fn=noop,threads=auto | prefetch:depth=auto"
if [ "$rc" -eq 0 ] && grep -qE "^map .* threads=[0-9]+" "$TMP/auto_text.out" &&
    grep -qE "^prefetch .* depth=[0-9]+" "$TMP/auto_text.out"; then
    pass "the stage table shows threads and depth"
else
    fail "auto table: rc $rc: $(cat "$TMP/auto_text.out" "$TMP/auto_text.err")"
fi
grep -q "int|auto" "$TMP/stages.out" && grep -q "threads .*auto" "$TMP/stages.out" ||
    fail "echoflow stages does not say threads takes auto"
for bad in "threads=0:between 1 and 256 or 'auto'" "threads=abc:expects an int or 'auto'"; do
    run auto_bad run "range:n=3 | map:fn=noop,${bad%%:*}"
    if [ "$rc" -ne 0 ] && grep -qF -- "option 'threads'" "$TMP/auto_bad.err" &&
        grep -qF -- "${bad#*:}" "$TMP/auto_bad.err"; then
        pass "run map:${bad%%:*} refused"
    else
        fail "run map:${bad%%:*}: rc $rc, $(cat "$TMP/auto_bad.err")"
    fi
done

# plain (non-JSON) report
run plain run "range:n=100 | batch:10"
if [ "$rc" -ne 0 ]; then
    fail "run without --json exited $rc: $(cat "$TMP/plain.err")"
elif [ ! -s "$TMP/plain.out" ]; then
    fail "run without --json printed nothing"
else
    pass "plain report"
fi

# ---- errors ---------------------------------------------------------
expect_spec_error() {
    local name=$1 spec=$2 word=$3
    run "$name" run --json "$spec"
    if [ "$rc" -eq 0 ]; then
        fail "run \"$spec\" exited 0"
    elif ! grep -q -- "$word" "$TMP/$name.err"; then
        fail "run \"$spec\": stderr does not name \"$word\": $(cat "$TMP/$name.err")"
    else
        pass "bad spec \"$spec\""
    fi
}
expect_spec_error bad_size "range:n=10 | batch:size=0" size
expect_spec_error bad_option "range:n=10 | batch:sise=4" sise
expect_spec_error bad_stage "range:n=10 | bogus:4" bogus
expect_spec_error bad_factor "range:n=10 | echo:factor=0.5" factor
expect_spec_error bad_file "idx:images=$TMP/nonexistent-images" "$TMP/nonexistent-images"

run no_args
[ "$rc" -ne 0 ] || fail "echoflow with no arguments exited 0"
run bad_cmd frobnicate
[ "$rc" -ne 0 ] || fail "echoflow frobnicate exited 0"
run no_spec run --json
[ "$rc" -ne 0 ] || fail "echoflow run --json (no spec) exited 0"
# pack: a bad pattern, a field with no WebDataset form, then a real pack
run pack_pattern pack "range:n=3,bytes=4" "$TMP/no-number.tar"
[ "$rc" -eq 2 ] && grep -q "no %d" "$TMP/pack_pattern.err" ||
    fail "pack with a bad pattern: rc $rc, $(cat "$TMP/pack_pattern.err")"
run pack_field pack "range:n=3,bytes=2 | map:fn=to_f32" "$TMP/f-%d.tar"
[ "$rc" -eq 1 ] && grep -q "field 'data'" "$TMP/pack_field.err" &&
    [ ! -e "$TMP/f-0.tar" ] && [ ! -e "$TMP/f-0.tar.partial" ] ||
    fail "pack of a batch: rc $rc, $(cat "$TMP/pack_field.err")"
run pack_ok pack --per-shard 4 "range:n=10,bytes=3" "$TMP/r-%02d.tar"
if [ "$rc" -eq 0 ] && [ "$(tail -n 1 "$TMP/pack_ok.out")" = "$TMP/r-{00..02}.tar" ]; then
    run pack_back run --json "tar:urls=$TMP/r-{00..02}.tar"
    [ "$rc" -eq 0 ] && grep -q '"items": 10' "$TMP/pack_back.out" ||
        fail "reading packed shards back: $(cat "$TMP/pack_back.err")"
else
    fail "pack: rc $rc, $(cat "$TMP/pack_ok.out" "$TMP/pack_ok.err")"
fi

# tokens: documents' ids (here range's u8 bytes, with --bytes) into a
# token file, read back by the tokens source; an id that does not fit, a
# field that is not ids and bytes without --bytes are errors that leave
# no file behind
run tokens_bytes tokens "range:n=3,bytes=2" "$TMP/tok5.bin" --field data
[ "$rc" -eq 1 ] && grep -qF "field 'data' of sample 0 is u8: bytes" \
    "$TMP/tokens_bytes.err" && grep -qF -- "--bytes" "$TMP/tokens_bytes.err" &&
    [ -z "$(ls "$TMP" | grep tok5)" ] &&
    pass "tokens: a u8 field refused without --bytes" ||
    fail "tokens of u8 without --bytes: rc $rc, $(cat "$TMP/tokens_bytes.err"; ls "$TMP")"
run tokens_ok tokens "range:n=10,bytes=5" "$TMP/tok.bin" --field data --eos 300 --bytes
if [ "$rc" -eq 0 ] &&
    grep -q "^wrote 60 tokens of 10 documents (uint16) to $TMP/tok.bin" "$TMP/tokens_ok.out" &&
    [ "$(stat -c %s "$TMP/tok.bin")" -eq 120 ] &&
    "$PY" - "$TMP/tok.bin" <<'EOF'
import struct, sys
ids = struct.unpack("<60H", open(sys.argv[1], "rb").read())
want = [t for i in range(10) for t in [(i + j) % 256 for j in range(5)] + [300]]
sys.exit(0 if list(ids) == want else "ids %r, expected %r" % (ids, want))
EOF
then
    run tokens_back run --json "tokens:files=$TMP/tok.bin,block=4"
    [ "$rc" -eq 0 ] && grep -q '"items": 14' "$TMP/tokens_back.out" &&
        pass "tokens written and read back" ||
        fail "reading tokens back: $(cat "$TMP/tokens_back.err")"
else
    fail "tokens: rc $rc, $(cat "$TMP/tokens_ok.out" "$TMP/tokens_ok.err")"
fi
run tokens_eos tokens "range:n=3,bytes=2" "$TMP/tok2.bin" --field data --eos 70000 --bytes
[ "$rc" -eq 1 ] && grep -q "eos 70000 does not fit uint16" "$TMP/tokens_eos.err" &&
    [ -z "$(ls "$TMP" | grep tok2)" ] && pass "tokens: eos past uint16 refused" ||
    fail "tokens with eos 70000: rc $rc, $(cat "$TMP/tokens_eos.err"; ls "$TMP")"
run tokens_field tokens "range:n=3" "$TMP/tok3.bin" --dtype uint32 --field index
[ "$rc" -eq 1 ] && grep -qF "field 'index' of sample 0 (epoch 0) is i64 []" \
    "$TMP/tokens_field.err" && [ -z "$(ls "$TMP" | grep tok3)" ] &&
    pass "tokens: a field that is not ids refused" ||
    fail "tokens of a scalar: rc $rc, $(cat "$TMP/tokens_field.err"; ls "$TMP")"
run tokens_dtype tokens --dtype int8 "range:n=3" "$TMP/tok4.bin"
[ "$rc" -eq 2 ] && pass "tokens: --dtype int8 refused" ||
    fail "tokens --dtype int8: rc $rc"

# pack_interrupt NAME SIGNAL STATUS: a throttled pack (200 samples/s, 100 a
# shard) gets SIGNAL once its first shard is complete (however long a
# loaded machine takes to get there): it must exit STATUS, leave no
# .partial file, keep the complete shards and name them in its summary. A
# pack that ignores the signal is killed after 10 s.
pack_interrupt() {
    local name=$1 sig=$2 want=$3 out="$TMP/$1" waited=0
    mkdir -p "$out"
    "$CLI" pack --per-shard 100 "range:n=1000000,bytes=10 | throttle:rate=200" \
        "$out/s-%04d.tar" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local pid=$!
    while [ ! -e "$out/s-0000.tar" ] && kill -0 "$pid" 2>/dev/null &&
        [ "$waited" -lt 1200 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    waited=0
    kill "-$sig" "$pid"
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    local shards partial
    shards=$(find "$out" -name '*.tar' | wc -l)
    partial=$(find "$out" -name '*.partial' | wc -l)
    if [ "$rc" -eq "$want" ] && [ "$partial" -eq 0 ] && [ "$shards" -ge 1 ] &&
        grep -q "interrupted by $sig" "$TMP/$name.out" &&
        grep -q "^packed $((shards * 100)) samples into $shards shards:" \
            "$TMP/$name.out" &&
        [ "$(tail -n 1 "$TMP/$name.out")" = \
            "$(if [ "$shards" -eq 1 ]; then echo "$out/s-0000.tar"; else
                printf '%s/s-{0000..%04d}.tar' "$out" $((shards - 1)); fi)" ]; then
        pass "pack interrupted by $sig: exit $rc, $shards complete shards kept"
    else
        fail "pack interrupted by $sig: rc $rc (expected $want), $shards shards," \
            "$partial partial; stdout: $(cat "$TMP/$name.out")" \
            "stderr: $(cat "$TMP/$name.err")"
    fi
}
pack_interrupt pack_sigint SIGINT 130
pack_interrupt pack_sigterm SIGTERM 143

# every subcommand answers --help on stdout with status 0
for sub in run pack train; do
    run help_$sub $sub --help
    # train without OpenBLAS says so and exits 2: that is its answer
    if [ "$sub" = train ] && grep -q "needs OpenBLAS" "$TMP/help_$sub.err"; then
        continue
    fi
    [ "$rc" -eq 0 ] && grep -q "usage: echoflow" "$TMP/help_$sub.out" ||
        fail "echoflow $sub --help: rc $rc, $(cat "$TMP/help_$sub.out" "$TMP/help_$sub.err")"
done

for sub in stages version; do
    run help_$sub $sub --help
    [ "$rc" -eq 0 ] && grep -q "usage: echoflow $sub" "$TMP/help_$sub.out" ||
        fail "echoflow $sub --help: rc $rc"
    run extra_$sub $sub --bogus
    [ "$rc" -eq 2 ] && grep -q "unknown option '--bogus'" "$TMP/extra_$sub.err" ||
        fail "echoflow $sub --bogus: rc $rc, $(cat "$TMP/extra_$sub.err")"
done

# one parser: --opt=value, missing values and arguments, stray words
run opt_eq run --json --seed=7 "range:n=3"
[ "$rc" -eq 0 ] && grep -q '"seed": 7,' "$TMP/opt_eq.out" ||
    fail "run --seed=7: rc $rc, $(cat "$TMP/opt_eq.err")"
run no_value run "range:n=3" --seed
[ "$rc" -eq 2 ] && grep -q "option --seed needs a value" "$TMP/no_value.err" ||
    fail "run ... --seed: rc $rc, $(cat "$TMP/no_value.err")"
run flag_value run --json=yes "range:n=3"
[ "$rc" -eq 2 ] && grep -q "takes no value" "$TMP/flag_value.err" ||
    fail "run --json=yes: rc $rc, $(cat "$TMP/flag_value.err")"
run two_specs run range:n=3 range:n=4
[ "$rc" -eq 2 ] && grep -q "unexpected argument 'range:n=4'" "$TMP/two_specs.err" ||
    fail "run with two specs: rc $rc, $(cat "$TMP/two_specs.err")"
run pack_one pack "range:n=3"
[ "$rc" -eq 2 ] && grep -q "echoflow pack: needs SPEC PATTERN" "$TMP/pack_one.err" ||
    fail "pack without PATTERN: rc $rc, $(cat "$TMP/pack_one.err")"
run per_shard pack --per-shard 2.5 "range:n=3" "$TMP/ps-%d.tar"
[ "$rc" -eq 2 ] && grep -q -- "--per-shard expects a whole number from 1" "$TMP/per_shard.err" ||
    fail "pack --per-shard 2.5: rc $rc, $(cat "$TMP/per_shard.err")"

# --stats-every: JSON lines while running, then the report
run stats_every run --json --stats-every 0.05 \
    "range:n=4000 | throttle:rate=8000 | echo:factor=auto,max=4"
cat >"$TMP/stats_every.py" <<'PYEOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
docs = [json.loads(l) for l in lines]
ticks, report = docs[:-1], docs[-1]
if len(ticks) < 5:
    sys.exit("%d stats lines in about half a second, expected at least 5" % len(ticks))
if "spec" not in report or report["items"] < 4000:
    sys.exit("the last line is not the report: %r" % report)
prev_t = prev_items = -1
for d in ticks:
    if d["t"] <= prev_t or d["items"] < prev_items or d["items"] > report["items"]:
        sys.exit("stats lines out of order: %r" % d)
    prev_t, prev_items = d["t"], d["items"]
    echo = [s for s in d["stages"] if s["name"] == "echo"]
    if len(echo) != 1 or "effective_factor" not in echo[0]:
        sys.exit("a stats line lacks the echo stage's figures: %r" % d)
if ticks[-1]["items"] == 0:
    sys.exit("no progress in the stats lines")
PYEOF
if [ "$rc" -eq 0 ] && "$PY" "$TMP/stats_every.py" "$TMP/stats_every.out"; then
    pass "run --stats-every streams JSON lines, then the report"
else
    fail "run --stats-every: rc $rc, $(head -c 600 "$TMP/stats_every.out")"
fi
expect_refused --stats-every "--stats-every expects a number from 0.01 to" \
    0 -1 nan x ""

# the progress line, on a terminal only
if command -v script >/dev/null; then
    script -qec "'$CLI' run 'range:n=3000 | throttle:rate=3000 | echo:factor=auto,max=4' >/dev/null" \
        /dev/null >"$TMP/tty.out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && grep -q "items/s  echo factor [0-9.]*" "$TMP/tty.out" ||
        fail "progress line on a terminal: rc $rc, $(head -c 400 "$TMP/tty.out")"
    run no_tty run "range:n=3000 | throttle:rate=3000"
    [ "$rc" -eq 0 ] && ! grep -q "items/s" "$TMP/no_tty.err" ||
        fail "a progress line without a terminal: $(head -c 300 "$TMP/no_tty.err")"
fi

run bad_policy run --on-error sometimes "range:n=3"
[ "$rc" -eq 2 ] && grep -q "fail or skip" "$TMP/bad_policy.err" ||
    fail "run --on-error sometimes: rc $rc, $(cat "$TMP/bad_policy.err")"
run skip_none run --json --on-error skip "range:n=5,shard=1/2"
if [ "$rc" -ne 0 ]; then
    fail "run --on-error skip exited $rc: $(cat "$TMP/skip_none.err")"
else
    cat "$TMP/common.py" - >"$TMP/skip_none.py" <<'EOF'
need(doc["items"] == 2, "shard 1/2 of 5: items = %r" % doc["items"])
need(doc["skipped"] == 0, "skipped = %r" % doc["skipped"])
need(doc["abandoned"] == 0 and doc["lost_bytes"] == 0, "abandoned, lost")
EOF
    check_json skip_none "$TMP/skip_none.py"
fi

# a truncated shard and one corrupt at byte 30000, under skip: the run goes
# on, but says that two shards were abandoned, where, and what was lost
"$CLI" pack --per-shard 1000 "range:n=2000,bytes=100" "$TMP/lost-%d.tar" \
    >/dev/null
head -c 60000 "$TMP/lost-0.tar" >"$TMP/lost-trunc.tar"
printf 'garbage!' | dd of="$TMP/lost-1.tar" bs=1 seek=30000 conv=notrunc \
    2>/dev/null
size1=$(stat -c %s "$TMP/lost-1.tar")
lost_spec="tar:urls=\"$TMP/lost-trunc.tar $TMP/lost-1.tar\""
run lost run --on-error skip "$lost_spec"
if [ "$rc" -eq 0 ] &&
        grep -q "^abandoned       2 shards or files; $((size1 - 30208)) bytes of them left unread" "$TMP/lost.out" &&
        grep -qE "shard abandoned at byte (60000 of 60000|30208 of $size1)" "$TMP/lost.out"; then
    pass "lost shards under skip are reported with the bytes left unread"
else
    fail "lost shards: rc $rc, $(cat "$TMP/lost.out" "$TMP/lost.err")"
fi
run lost_json run --json --on-error skip "$lost_spec"
cat "$TMP/common.py" - >"$TMP/lost_json.py" <<PYEOF
need(doc["skipped"] == 0, "skipped = %r" % doc["skipped"])
need(doc["abandoned"] == 2, "abandoned = %r" % doc["abandoned"])
need(doc["lost_bytes"] == $size1 - 30208, "lost_bytes = %r" % doc["lost_bytes"])
need("shard abandoned at byte" in doc["first_abandon"], doc["first_abandon"])
need(stage("tar")["abandoned"] == 2, "tar abandoned")
PYEOF
check_json lost_json "$TMP/lost_json.py"

# ---- the memory budget --------------------------------------------------
expect_refused --memory-budget \
    "--memory-budget expects a size in bytes, with K, M, G or T for binary multiples (512M, 2G), or 0 for no limit; got '%s'" \
    10x -1 1.5G K "" 99999999999999999999 17179869184T
run budget_small run --memory-budget 1K "range:n=3,bytes=2000 | prefetch"
[ "$rc" -eq 1 ] && grep -q "range: sample 0: 2008 bytes, over the memory budget of 1024 bytes" "$TMP/budget_small.err" ||
    fail "a sample over the budget: rc $rc, $(cat "$TMP/budget_small.err")"
run budget_json run --json --memory-budget 64K "range:n=2000,bytes=1000 | prefetch:depth=1000"
cat "$TMP/common.py" - >"$TMP/budget_json.py" <<'PYEOF'
need(doc["memory_budget"] == 65536, "memory_budget = %r" % doc["memory_budget"])
need(0 < doc["peak_bytes_held"] <= 65536 + 1008, "peak = %r" % doc["peak_bytes_held"])
need(doc["bytes_held"] == 0, "bytes_held = %r" % doc["bytes_held"])
PYEOF
check_json budget_json "$TMP/budget_json.py"
run budget_pack pack --memory-budget 1K "range:n=3,bytes=2000 | prefetch" "$TMP/b-%d.tar"
[ "$rc" -eq 1 ] && grep -q "over the memory budget of 1024 bytes" "$TMP/budget_pack.err" ||
    fail "pack --memory-budget: rc $rc, $(cat "$TMP/budget_pack.err")"

# ---- numbers on the command line ---------------------------------------
# a seed is a whole number in 0..2^64-1: converting nan, inf or 1e300 from
# a double is undefined, and -1 would wrap
expect_refused --seed \
    "--seed expects a whole number from 0 to 18446744073709551615, got '%s'" \
    nan inf 1e300 -1 1.5 +1 " 1" "" 7x 18446744073709551616
run max_seed run --seed 18446744073709551615 --json "range:n=3"
[ "$rc" -eq 0 ] && grep -q '"seed": 18446744073709551615,' "$TMP/max_seed.out" ||
    fail "run --seed 2^64-1: rc $rc, $(cat "$TMP/max_seed.out" "$TMP/max_seed.err")"
expect_refused --consume-us "--consume-us expects a number from 0 to" \
    inf nan -inf 1e300 -1

# ---- JSON is UTF-8 whatever the bytes of paths and messages ------------
# a path with bytes that are no UTF-8 (lone 0xff 0xfe, an overlong NUL, a
# surrogate, a code point above U+10FFFF, a cut sequence) beside valid
# characters: the spec and the error message carry it into the JSON
BADPATH="$TMP/a$(printf '\xff\xfe')b$(printf '\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80')é😀$(printf '\xe2\x82')"
run bad_utf8 run --json "idx:images=$BADPATH"
cat >"$TMP/utf8.py" <<'PYEOF'
import json, sys
raw = open(sys.argv[1], "rb").read()
try:
    doc = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 raises
except ValueError as e:
    sys.exit("stdout is not UTF-8 JSON: %s" % e)
for k in ("spec", "error"):
    if "é😀" not in doc.get(k, ""):
        sys.exit("%s lost its valid characters: %r" % (k, doc.get(k)))
    if "a\ufffd\ufffdb" not in doc[k]:
        sys.exit("%s: 0xff 0xfe are not two U+FFFD: %r" % (k, doc[k]))
PYEOF
if [ "$rc" -eq 1 ] && "$PY" "$TMP/utf8.py" "$TMP/bad_utf8.out"; then
    pass "run --json: a path of invalid UTF-8 gives valid JSON"
else
    fail "run --json with invalid UTF-8 in the spec: rc $rc"
fi
# a message cut mid-character at the library's 511-byte limit: a run of
# 3-byte characters at two offsets, so that at least one cut falls inside
# a character
EURO=$(printf '\xe2\x82\xac%.0s' $(seq 200))
cat >"$TMP/cut.py" <<'PYEOF'
import json, sys
doc = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
if "€€€" not in doc["error"]:
    sys.exit("error %r" % doc["error"])
PYEOF
for pre in "" x; do
    run cut_utf8 run --json "idx:images=$TMP/$pre$EURO/$EURO"
    if [ "$rc" -eq 1 ] && "$PY" "$TMP/cut.py" "$TMP/cut_utf8.out"; then
        pass "run --json: a long message cut at offset '$pre' is valid UTF-8"
    else
        fail "run --json with a message cut mid-character ('$pre'): rc $rc"
    fi
done

# ---- a report that cannot be written is a failure -----------------------
# stdout is buffered: a full disk shows only when it is flushed at exit
if [ -w /dev/full ]; then
    for args in "run --json range:n=10" "run range:n=10" "stages" "version" \
                "pack range:n=3,bytes=4 $TMP/full-%d.tar"; do
        # shellcheck disable=SC2086
        "$CLI" $args >/dev/full 2>"$TMP/full.err"
        rc=$?
        if [ "$rc" -eq 1 ] && grep -q "writing the report to stdout failed: No space left on device" "$TMP/full.err"; then
            pass "$args > /dev/full: exit 1 with a message"
        else
            fail "$args > /dev/full: rc $rc, $(cat "$TMP/full.err")"
        fi
    done
else
    echo "skip: no writable /dev/full here"
fi

# ---- Fashion-MNIST ----------------------------------------------------
IMG="$FMNIST/train-images-idx3-ubyte.gz"
LAB="$FMNIST/train-labels-idx1-ubyte.gz"
if [ ! -r "$IMG" ] || [ ! -r "$LAB" ]; then
    fail "Fashion-MNIST is missing under $FMNIST: apt-get install dataset-fashion-mnist"
else
    run fmnist run --json "idx:images=$IMG,labels=$LAB | echo:2 | batch:128"
    if [ "$rc" -ne 0 ]; then
        fail "run on Fashion-MNIST exited $rc: $(cat "$TMP/fmnist.err")"
    else
        cat "$TMP/common.py" - >"$TMP/fmnist.py" <<'EOF'
need(stage("idx")["items_out"] == 60000, "idx items_out")
e = stage("echo")
need(figure(e, "fresh") == 60000, "fresh = %r" % figure(e, "fresh"))
need(figure(e, "echoed") == 60000, "echoed = %r" % figure(e, "echoed"))
need(e["items_out"] == 120000, "echo items_out = %r" % e["items_out"])
need(doc["items"] == 938, "items = %r, expected 938 batches" % doc["items"])
EOF
        check_json fmnist "$TMP/fmnist.py"
    fi
fi

# ---- train: echo policy feedback ------------------------------------------
# (a function, called where the trainer is built)
train_feedback_tests() {
    # a policy changes the echo stage only: the two pipelines as ever
    run train_split train --data fashion-mnist --echo factor=2,policy=rank --print-spec
    [ "$rc" -eq 0 ] && [ "$(wc -l <"$TMP/train_split.out")" -eq 2 ] &&
        grep -q "train-labels-idx1-ubyte.gz | shuffle:60000 | repeat | echo:factor=2,policy=rank | batch" "$TMP/train_split.out" ||
        fail "train --echo policy=rank --print-spec: rc $rc, $(cat "$TMP/train_split.out" "$TMP/train_split.err")"
    # RHO-LOSS is retired (docs/RESULTS.md): no --holdout, no policy=reducible
    local spec="idx:images=$IMG,labels=$LAB | batch:128"
    local test_spec="idx:images=$IMG,labels=$LAB | take:1000 | batch:1000"
    run train_hold_bad train --data fashion-mnist --holdout 1000 --max-fresh 128
    [ "$rc" -eq 2 ] && grep -q -- "--holdout" "$TMP/train_hold_bad.err" ||
        fail "train --holdout: rc $rc (expected 2), $(cat "$TMP/train_hold_bad.err")"
    run train_hold_bad train --spec "$spec | echo:factor=2,policy=reducible" \
        --test-spec "$test_spec" --max-fresh 128
    [ "$rc" -eq 2 ] && grep -q "expected uniform, rank" "$TMP/train_hold_bad.err" ||
        fail "policy=reducible: rc $rc (expected 2), $(cat "$TMP/train_hold_bad.err")"

    # a policy feeds back every example trained on
    cat >"$TMP/train_rank.py" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
if doc["echo_policy"] != "rank":
    sys.exit("echo_policy %r" % doc["echo_policy"])
if not 0 < doc["feedback_values"] == doc["examples"]:
    sys.exit("feedback_values %r of %r examples"
             % (doc["feedback_values"], doc["examples"]))
if "holdout" in doc or "holdout_accuracy" in doc:
    sys.exit("RHO-LOSS's fields are retired: %r" % sorted(doc))
EOF
    run train_rank train --data fashion-mnist --echo factor=2,shuffle=100,policy=rank \
        --max-fresh 1280 --eval-every 1280 --json
    if [ "$rc" -ne 0 ]; then
        fail "train --echo ...,policy=rank: rc $rc: $(cat "$TMP/train_rank.err")"
    else
        check_json train_rank "$TMP/train_rank.py"
    fi
    # the policy read from a --spec, spaced and quoted
    run train_rank train --spec "$spec | echo: factor=2 , policy = \"rank\" | prefetch:2" \
        --test-spec "$test_spec" --max-fresh 1280 --eval-every 1280 --json
    if [ "$rc" -ne 0 ]; then
        fail "train --spec ... echo:policy=rank: rc $rc: $(cat "$TMP/train_rank.err")"
    else
        check_json train_rank "$TMP/train_rank.py"
    fi
}

# ---- train -------------------------------------------------------------
run train_help train --help
if [ "$rc" -eq 2 ] && grep -q "needs OpenBLAS" "$TMP/train_help.err"; then
    pass "train: this build has no trainer, and says which package to install"
else
    [ "$rc" -eq 0 ] && grep -q -- "--echo-at" "$TMP/train_help.out" ||
        fail "train --help: rc $rc"
    # --print-spec gives the preset's two pipelines, as the experiments read them
    run train_spec train --data fashion-mnist --model cnn --echo factor=2 \
        --print-spec
    if [ "$rc" -eq 0 ] && [ "$(wc -l <"$TMP/train_spec.out")" -eq 2 ] &&
        grep -q "^idx:.*shuffle:60000 | repeat | echo:factor=2 | random_crop" \
            "$TMP/train_spec.out" &&
        grep -q "t10k-images.* | batch:1000$" "$TMP/train_spec.out"; then
        pass "train --print-spec prints the training and held-out pipelines"
    else
        fail "train --print-spec: rc $rc, $(cat "$TMP/train_spec.out" "$TMP/train_spec.err")"
    fi
    for bad in "--model rnn" "--lr x" "--batch 0" "--echo-at middle" \
               "--schedule cosine" "--bogus 1" "--lr nan" "--batch nan" \
               "--batch 1.5" "--threads 0" "--data imagenet" \
               "--seed nan" "--seed inf" "--seed 1e300" "--seed -1" \
               "--seed 1.5"; do
        # shellcheck disable=SC2086
        # (a short run, should a bad value get through)
        run train_bad train --data fashion-mnist --max-fresh 128 $bad
        if [ "$rc" -ne 2 ] || [ ! -s "$TMP/train_bad.err" ]; then
            fail "train $bad: exit $rc (expected 2 with a message)"
        else
            pass "train $bad refused: $(head -n 1 "$TMP/train_bad.err")"
        fi
    done
    for bad in "--data imagenet" "--spec range:n=1"; do
        # shellcheck disable=SC2086
        run train_bad train $bad
        [ "$rc" -eq 2 ] && [ -s "$TMP/train_bad.err" ] ||
            fail "train $bad: exit $rc (expected 2 with a message)"
    done
    run train_seed train --data fashion-mnist --max-fresh 128 --seed 1.5
    grep -qF -- "--seed expects a whole number from 0 to 18446744073709551615, got '1.5'" \
        "$TMP/train_seed.err" ||
        fail "train --seed 1.5: $(head -n 3 "$TMP/train_seed.err")"
    run train_max_seed train --data fashion-mnist --max-fresh 128 \
        --eval-every 128 --seed 18446744073709551615 --json
    [ "$rc" -eq 0 ] && grep -q '"seed": 18446744073709551615,' "$TMP/train_max_seed.out" ||
        fail "train --seed 2^64-1: rc $rc, $(head -n 3 "$TMP/train_max_seed.err")"
    # the report of a short run, and --help, into a full disk
    if [ -w /dev/full ]; then
        for args in "--help" "--data fashion-mnist --max-fresh 128 --eval-every 128 --json"; do
            # shellcheck disable=SC2086
            "$CLI" train $args >/dev/full 2>"$TMP/train_full.err"
            rc=$?
            [ "$rc" -eq 1 ] && grep -q "writing the report to stdout failed: No space left on device" "$TMP/train_full.err" ||
                fail "train $args > /dev/full: rc $rc, $(cat "$TMP/train_full.err")"
        done
    fi
    # a bad echo option is named by the pipeline
    run train_bad_echo train --data fashion-mnist --echo factor=0.5
    grep -q "factor" "$TMP/train_bad_echo.err" && [ "$rc" -ne 0 ] ||
        fail "train --echo factor=0.5: rc $rc, $(cat "$TMP/train_bad_echo.err")"
    # a short real run, echoed, with the JSON a script reads
    run train_short train --data fashion-mnist --max-fresh 2560 \
        --eval-every 1280 --echo factor=2 --threads 2 --json
    if [ "$rc" -ne 0 ]; then
        fail "train short run exited $rc: $(cat "$TMP/train_short.err")"
    else
        cat >"$TMP/train_short.py" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
def need(cond, msg):
    if not cond:
        sys.exit(msg)
for k in ("reached", "fresh_to_target", "steps_to_target", "time_to_target_s",
          "eval_time_s", "final_accuracy", "train_examples_per_s", "echo"):
    need(k in doc, "missing key " + k)
need(doc["fresh"] == 2560, "fresh = %r" % doc["fresh"])
need(doc["steps"] == 40, "steps = %r (20 fresh batches, each twice)" % doc["steps"])
need(doc["echo"]["effective_factor"] == 2, "echo = %r" % doc["echo"])
need(0.3 < doc["final_accuracy"] <= 1, "accuracy %r" % doc["final_accuracy"])
need(doc["reached"] is False, "no target was set")
# no policy: nothing fed back
need(doc["echo_policy"] == "uniform", "echo_policy %r" % doc["echo_policy"])
need(doc["feedback_values"] == 0, "feedback_values %r" % doc["feedback_values"])
EOF
        check_json train_short "$TMP/train_short.py"
    fi
    # images with a channel dimension ([B,1,28,28], as decode gives
    # [B,28,28,1]) in both pipelines, and --save-model's file
    run train_chw train --spec "idx:images=$IMG,labels=$LAB | to_chw | batch:128" \
        --test-spec "idx:images=$IMG,labels=$LAB | take:2000 | to_chw | batch:1000" \
        --max-fresh 1280 --eval-every 1280 --save-model "$TMP/chw.model" --json
    if [ "$rc" -eq 0 ] && [ "$(head -c 8 "$TMP/chw.model")" = EFTMODEL ] &&
            [ ! -e "$TMP/chw.model.partial" ]; then
        pass "train: [B,1,28,28] images train and evaluate; the model is saved"
    else
        fail "train with channels: rc $rc: $(cat "$TMP/train_chw.err")"
    fi
    # a held-out set without an image field, or not batched: named, not
    # read from an uninitialised tensor
    run train_noimg train --spec "idx:images=$IMG,labels=$LAB | batch:128" \
        --test-spec "range:n=100 | batch:10" --max-fresh 128
    [ "$rc" -eq 1 ] && grep -q "evaluation set: its samples have no 'image' field" "$TMP/train_noimg.err" ||
        fail "a test set without images: rc $rc, $(cat "$TMP/train_noimg.err")"
    run train_nobatch train --spec "idx:images=$IMG,labels=$LAB | batch:128" \
        --test-spec "idx:images=$IMG,labels=$LAB | take:10" --max-fresh 128
    [ "$rc" -eq 1 ] && grep -q "evaluation set: end the spec with batch" "$TMP/train_nobatch.err" ||
        fail "an unbatched test set: rc $rc, $(cat "$TMP/train_nobatch.err")"
    run train_save_bad train --data fashion-mnist --max-fresh 128 \
        --save-model "$TMP/no/such/dir/m.model"
    [ "$rc" -eq 1 ] && grep -q "no/such/dir.*cannot create" "$TMP/train_save_bad.err" ||
        fail "--save-model into a missing folder: rc $rc, $(cat "$TMP/train_save_bad.err")"
    # a run that diverges (NaN loss) stops there and still prints valid
    # JSON: null for the loss
    run train_nan train --data fashion-mnist --lr 50 --max-fresh 25600 \
        --eval-every 1280 --json
    if [ "$rc" -ne 0 ]; then
        fail "diverging train run exited $rc: $(cat "$TMP/train_nan.err")"
    else
        cat >"$TMP/train_nan.py" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
if doc["final_loss"] is not None or doc["reached"] is not False:
    sys.exit("final_loss %r, reached %r" % (doc["final_loss"], doc["reached"]))
if doc["diverged"] is not True or doc["fresh"] >= 25600:
    sys.exit("diverged %r after %r fresh examples: expected an early stop"
             % (doc["diverged"], doc["fresh"]))
EOF
        check_json train_nan "$TMP/train_nan.py"
    fi
    train_feedback_tests
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures CLI check(s) failed" >&2
    exit 1
fi
echo "all CLI checks passed"
