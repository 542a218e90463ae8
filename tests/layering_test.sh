#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Each folder of src/ includes only the folders below it (docs/design.md,
# "Layers", shows the same table): every quoted #include in a file under
# src/ must name a header of the file's own folder, of a folder its row
# below allows, or the public header (include/echoflow/); a <...> include
# must be a system header, not one of ours by another spelling. Fails
# naming file:line of each include that reaches further, and each folder
# that has no row (a new folder needs one).
#
# usage: layering_test.sh SRC_DIR INCLUDE_DIR
set -u
src=$(realpath "$1")
inc=$(realpath "$2")

# folder -> what it may include besides itself and the public header: a
# folder of src/, or one file of src/.
declare -A allowed=(
    [core]=""
    [common]=""
    [io]="core"
    [codec]="core common io"
    [tokenizer]="core io"
    # stages/list.h: the stages' names, from which the registry follows
    [pipeline]="core common stages/list.h"
    [writers]="core common codec"
    [stages]=""
    [stages/flow]="core pipeline"
    [stages/sources]="core common io codec pipeline"
    [stages/formats]="core codec pipeline"
    [stages/image]="core common codec pipeline"
    [stages/text]="core tokenizer pipeline"
    # the service builds pipelines; the `service` source reaches it
    # through pipeline/service_link.h, never the other way
    [service]="core pipeline"
)

# Sets `target` to the file a quoted include names, searched as the
# compiler does: the including file's folder, then the include paths
# (src/, include/); empty when none has it. (A variable, not output: a
# subshell per include would make the test slow.)
resolve() {
    local dir=$1 name=$2 d
    target=
    for d in "$dir" "$src" "$inc"; do
        if [ -f "$d/$name" ]; then
            # realpath (a process) only where a ".." needs it
            case $name in
            *..*) target=$(realpath "$d/$name") ;;
            *) target=$d/$name ;;
            esac
            return
        fi
    done
}

# Whether `folder` may include the file `rel` (its path under src/).
may_include() {
    local folder=$1 rel=$2 target_dir=${2%/*} a
    [ "$target_dir" = "$folder" ] && return 0
    for a in ${allowed[$folder]}; do
        [ "$a" = "$target_dir" ] || [ "$a" = "$rel" ] && return 0
    done
    return 1
}

bad=0
checked=0
while IFS= read -r -d '' file; do
    dir=${file%/*}
    rel_file=${file#"$src"/}
    folder=${rel_file%/*}
    if [ -z "${allowed[$folder]+set}" ]; then
        echo "$rel_file: src/$folder/ has no row in $0's table"
        bad=1
        continue
    fi
    lineno=0
    while IFS= read -r line; do
        lineno=$((lineno + 1))
        [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*(.*)$ ]] ||
            continue
        arg=${BASH_REMATCH[1]}
        checked=$((checked + 1))
        where="src/$rel_file:$lineno"
        if [[ $arg =~ ^\"([^\"]+)\" ]]; then
            name=${BASH_REMATCH[1]}
            resolve "$dir" "$name"
            if [ -z "$target" ]; then
                echo "$where: \"$name\" is no header of src/ or include/"
                bad=1
            elif [[ $target == "$inc"/* ]]; then
                :
            elif [[ $target != "$src"/* ]]; then
                echo "$where: \"$name\" is $target, outside src/ and include/"
                bad=1
            elif ! may_include "$folder" "${target#"$src"/}"; then
                echo "$where: \"$name\" is src/${target#"$src"/}; src/$folder/" \
                    "may include only itself${allowed[$folder]:+ and }${allowed[$folder]}"
                bad=1
            fi
        elif [[ $arg =~ ^\<([^\>]+)\> ]]; then
            # a system header, unless it is one of ours by another spelling
            name=${BASH_REMATCH[1]}
            resolve "$src" "$name"
            if [ -n "$target" ]; then
                echo "$where: <$name> is src/${target#"$src"/}: write it" \
                    "in quotes, so that its layer is checked"
                bad=1
            fi
        else
            echo "$where: cannot check a computed include: $arg"
            bad=1
        fi
    done <"$file"
done < <(find "$src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print0)

if [ "$checked" -eq 0 ]; then
    echo "no #include found under $src: wrong folder?"
    exit 1
fi
if [ "$bad" -ne 0 ]; then
    echo "an include reaches a layer its folder may not (docs/design.md," \
        "\"Layers\")"
    exit 1
fi
echo "src/: $checked includes, each within its folder's layers"
