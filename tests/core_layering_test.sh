#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# src/core/ includes nothing of ours above it (docs/design.md, "Layers"):
# every #include in a file under src/core/ names a header of src/core/,
# the public header (include/echoflow/), or a system header. Fails naming
# each include that reaches another part of src/.
#
# usage: core_layering_test.sh SRC_DIR INCLUDE_DIR
set -u
src=$(realpath "$1")
inc=$(realpath "$2")
core="$src/core"
bad=0

# The file a quoted include names, searched as the compiler does: the
# including file's folder, then the include paths (src/, include/).
resolve() {
    local dir=$1 name=$2 d
    for d in "$dir" "$src" "$inc"; do
        if [ -f "$d/$name" ]; then
            realpath "$d/$name"
            return
        fi
    done
}

checked=0
while IFS= read -r -d '' file; do
    dir=$(dirname "$file")
    lineno=0
    while IFS= read -r line; do
        lineno=$((lineno + 1))
        [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*(.*)$ ]] ||
            continue
        arg=${BASH_REMATCH[1]}
        checked=$((checked + 1))
        where="${file#"$src"/}:$lineno"
        if [[ $arg =~ ^\"([^\"]+)\" ]]; then
            name=${BASH_REMATCH[1]}
            target=$(resolve "$dir" "$name")
            if [ -z "$target" ]; then
                echo "$where: \"$name\" is no header of src/core/ or include/"
                bad=1
            elif [[ $target != "$core"/* && $target != "$inc"/* ]]; then
                echo "$where: \"$name\" is ${target#"$src"/}, outside src/core/"
                bad=1
            fi
        elif [[ $arg =~ ^\<([^\>]+)\> ]]; then
            # a system header, unless it is one of ours by another spelling
            name=${BASH_REMATCH[1]}
            target=$(resolve "$src" "$name")
            if [ -n "$target" ] && [[ $target != "$core"/* ]]; then
                echo "$where: <$name> is ${target#"$src"/}, outside src/core/"
                bad=1
            fi
        else
            echo "$where: cannot check a computed include: $arg"
            bad=1
        fi
    done <"$file"
done < <(find "$core" -type f \( -name '*.c' -o -name '*.h' \) -print0)

if [ "$checked" -eq 0 ]; then
    echo "no #include found under $core: wrong folder?"
    exit 1
fi
if [ "$bad" -ne 0 ]; then
    echo "src/core/ must include only itself, echoflow.h and system headers"
    exit 1
fi
echo "src/core/: $checked includes, none above core"
