#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `echoflow pack "files:root=DIR" OUT`: an ImageFolder tree becomes
# WebDataset shards, each file a member KEY.EXT (lowercase extension) with
# its bytes unchanged and the label as KEY.cls, in torchvision's order;
# the tar source reads them back. A file whose key would hold a '.' (a
# name with two dots) is refused naming the key, since a reader would
# split the key there.
# Usage: files_pack_test.sh PATH/TO/echoflow
set -u

CLI=${1:?usage: files_pack_test.sh ECHOFLOW_BINARY}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_files_pack.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

R=$TMP/root
mkdir -p "$R/cat/sub" "$R/dog" "$TMP/out" "$TMP/bad/x"
printf 'A' >"$R/cat/a.JPG"
printf 'BB' >"$R/cat/sub/b.png"
printf 'no image' >"$R/cat/notes.txt"
printf 'CCC' >"$R/dog/c.jpeg"

if ! "$CLI" pack --per-shard 2 "files:root=$R" "$TMP/out/s-%03d.tar" \
    >"$TMP/pack.out" 2>"$TMP/pack.err"; then
    echo "FAIL: pack: $(cat "$TMP/pack.err")" >&2
    exit 1
fi
"$PY" - "$TMP/out" <<'EOF' || exit 1
import sys, tarfile
want = [("cat/a.jpg", b"A"), ("cat/a.cls", b"0"),
        ("cat/sub/b.png", b"BB"), ("cat/sub/b.cls", b"0"),
        ("dog/c.jpeg", b"CCC"), ("dog/c.cls", b"1")]
got = []
for name in ("s-000.tar", "s-001.tar"):
    with tarfile.open("%s/%s" % (sys.argv[1], name)) as t:
        got += [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
if got != want:
    sys.exit("FAIL: packed members %r, expected %r" % (got, want))
EOF
if ! "$CLI" run --json "tar:urls=$TMP/out/s-{000..001}.tar" \
    >"$TMP/back.out" 2>"$TMP/back.err" ||
    ! grep -q '"items": *3' "$TMP/back.out"; then
    echo "FAIL: read back: $(cat "$TMP/back.out" "$TMP/back.err")" >&2
    exit 1
fi

printf 'D' >"$TMP/bad/x/a.b.png"
if "$CLI" pack "files:root=$TMP/bad" "$TMP/out/bad-%d.tar" \
    >"$TMP/bad.out" 2>"$TMP/bad.err" ||
    ! grep -qF "key 'x/a.b'" "$TMP/bad.err"; then
    echo "FAIL: a key with a dot: $(cat "$TMP/bad.err")" >&2
    exit 1
fi
echo "files pack checks passed"
