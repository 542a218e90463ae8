#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# echoflow's C reference trainer against PyTorch on the same CPU cores, both
# measured in one run of this script.
#
#   bench/train_vs_torch.sh [--quick] [path/to/echoflow]     (default build/echoflow)
#
# Models, identical on both sides (see bench/torch_reference.py): mlp
# 784-256-256-10 ReLU; cnn conv5x5x32-pool-conv5x5x64-pool-fc256-fc10 (same
# padding, ReLU); He-normal weights, zero biases; mean softmax cross-entropy;
# SGD lr 0.03, momentum 0.9, Nesterov; batch 128; Fashion-MNIST from
# /usr/share/datasets/fashion-mnist, normalised (x/255 - 0.2860)/0.3530.
#
# 1) Training throughput, examples/s of training steps:
#    - echoflow: `echoflow train --data fashion-mnist --model M --max-fresh N
#      --eval-every 100000000 --json --threads T`, T in {1, 2}; its
#      train_examples_per_s (evaluation excluded; the input pipeline runs
#      alongside on the same cores, and --model cnn includes random crop and
#      flip). N is calibrated by a short run so that a run trains ~10 s
#      (~2 s with --quick);
#      note that train_time_s includes the pipeline's start-up.
#    - PyTorch (Debian's python3-torch on OpenBLAS, /usr/bin/python3): data
#      in memory as tensors, no augmentation, ~20 warm-up steps, then ~10 s (2 s)
#      timed; every torch.set_num_threads in {1,2} x OPENBLAS_NUM_THREADS in
#      {1,2}, each in its own process, once with the environment as it is
#      and once with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
#    The ratio is echoflow / the best PyTorch setting for that model.
# 2) Fresh examples to 88% test accuracy, MLP, lr 0.03, seeds 0 1 2:
#    evaluation on the full 10k test set every 10000 fresh examples; echoflow
#    `echoflow train --data fashion-mnist --model mlp --lr 0.03 --target-acc
#    0.88 --eval-every 10000 --seed S --json` (default --threads, 2) against
#    `torch_reference.py to-target --seed S` (one thread). Per seed, median
#    and range; the training seconds are shown but are not the point.
#
# --quick: ~2 s per throughput configuration and seed 0 only (smoke test,
# about 3-4 minutes). The full run takes about 10-15 minutes. Set
# BENCH_MODELS="mlp" to skip the (slow) cnn. Raw JSON lines and every
# run's stderr are kept in the directory printed at the end.
set -euo pipefail

quick=0
bin=
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "train_vs_torch.sh: unknown option $a" >&2; exit 2 ;;
    *) bin=$a ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "$bin" ]; then
  bin=$(realpath "$bin")
else
  bin=$root/build/echoflow
fi
cd "$root"
if [ ! -x "$bin" ]; then
  echo "train_vs_torch.sh: no echoflow binary at $bin; build it first:" >&2
  echo "  cmake -B build -S . && cmake --build build -j2" >&2
  exit 2
fi
py=/usr/bin/python3
ref=$root/bench/torch_reference.py
if ! $py -c 'import torch, numpy' 2>/dev/null; then
  echo "train_vs_torch.sh: $py lacks torch or numpy (apt-get install" \
       "python3-torch python3-numpy)" >&2
  exit 2
fi

if [ $quick = 1 ]; then secs=2; seeds="0"; else secs=10; seeds="0 1 2"; fi
models=${BENCH_MODELS:-mlp cnn}
work=$(mktemp -d /tmp/train_vs_torch.XXXXXX)
results=$work/results.jsonl
: >"$results"
log() { echo "[$(date +%T)] $*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; } # after a run: the 1-minute load

# One JSON line of results, tagged; a failed run is recorded as null.
record() { # tag-json run-json-or-empty
  printf '{"tag": %s, "run": %s}\n' "$1" "${2:-null}" >>"$results"
}

echoflow_run() { # name args...
  local name=$1
  shift
  local out
  if out=$(timeout 900 "$bin" train "$@" 2>"$work/$name.err" | tail -n 1) &&
    [ "${out:0:1}" = "{" ]; then
    echo "$out"
  else
    log "echoflow run $name failed; see $work/$name.err"
    echo ""
  fi
}

torch_run() { # name envmode ob args...
  local name=$1 envmode=$2 ob=$3
  shift 3
  local -a envcmd=(env)
  [ "$envmode" = unset ] && envcmd+=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  envcmd+=("OPENBLAS_NUM_THREADS=$ob")
  local out
  if out=$(timeout 900 "${envcmd[@]}" $py "$ref" "$@" 2>"$work/$name.err" |
             tail -n 1) && [ "${out:0:1}" = "{" ]; then
    echo "$out"
  else
    log "PyTorch run $name failed; see $work/$name.err"
    echo ""
  fi
}

{
  printf '{"tag": {"kind": "meta"}, "run": {"nproc": %s, "load_start": "%s", ' \
    "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf '"OPENBLAS_CORETYPE": "%s", "OPENBLAS_L2_SIZE": "%s", ' \
    "${OPENBLAS_CORETYPE-<unset>}" "${OPENBLAS_L2_SIZE-<unset>}"
  printf '"echoflow_blas": "%s", "quick": %s, "secs": %s}}\n' \
    "$(ldd "$bin" | awk '/blas/ {print $3; exit}')" "$quick" "$secs"
} >>"$results"

# ---- 1) throughput --------------------------------------------------------
for m in $models; do
  # N for ~$secs s of training, from a short run at the same thread count.
  # echoflow's train_time_s includes the pipeline's start-up (the training
  # set is gunzipped on the first batch), which weighs on a short run, so
  # its rate is scaled by 1.5. The final evaluation is not in train_time_s
  # but costs wall time (several seconds for the cnn).
  if [ "$m" = mlp ]; then cal=12800; else cal=640; fi
  for t in 1 2; do
    log "$m: echoflow --threads $t: calibrating --max-fresh"
    c=$(echoflow_run "cal-$m-t$t" --data fashion-mnist --model "$m" \
        --max-fresh $cal --eval-every 100000000 --json --threads "$t")
    rate=$(echo "$c" | $py -c 'import json,sys; print(json.load(sys.stdin)["train_examples_per_s"])' 2>/dev/null || echo 1000)
    n=$($py -c "import math; print(max(1280, math.ceil(1.5 * $rate * $secs / 128) * 128))")
    log "$m: echoflow --threads $t --max-fresh $n"
    r=$(echoflow_run "ef-$m-t$t" --data fashion-mnist --model "$m" \
        --max-fresh "$n" --eval-every 100000000 --json --threads "$t")
    record "{\"kind\": \"tput\", \"side\": \"echoflow\", \"model\": \"$m\", \"threads\": $t, \"load\": $(load1)}" "$r"
  done
  for envmode in as-is unset; do
    for ob in 1 2; do
      for tt in 1 2; do
        log "$m: PyTorch env $envmode, OPENBLAS_NUM_THREADS=$ob, torch threads $tt"
        r=$(torch_run "pt-$m-$envmode-ob$ob-tt$tt" "$envmode" "$ob" \
            throughput --model "$m" --threads "$tt" --seconds "$secs" --warmup 20)
        record "{\"kind\": \"tput\", \"side\": \"pytorch\", \"model\": \"$m\", \"env\": \"$envmode\", \"ob\": $ob, \"tt\": $tt, \"load\": $(load1)}" "$r"
      done
    done
  done
done

# ---- 2) fresh examples to 88% (mlp) -----------------------------------------
# echoflow with its default --threads (2); PyTorch on one thread
# (OPENBLAS_NUM_THREADS=1, set_num_threads(1)): the count of fresh examples
# does not depend on speed, and on a busy machine two OpenMP threads can run
# PyTorch ten times slower than one.
for s in $seeds; do
  log "to 88%: echoflow seed $s"
  r=$(echoflow_run "ef-target-s$s" --data fashion-mnist --model mlp --lr 0.03 \
      --target-acc 0.88 --eval-every 10000 --seed "$s" --json)
  record "{\"kind\": \"target\", \"side\": \"echoflow\", \"seed\": $s, \"threads\": \"default (2)\"}" "$r"
  log "to 88%: PyTorch seed $s"
  r=$(torch_run "pt-target-s$s" as-is 1 to-target --model mlp \
      --seed "$s" --lr 0.03 --target 0.88 --eval-every 10000 --threads 1)
  record "{\"kind\": \"target\", \"side\": \"pytorch\", \"seed\": $s, \"env\": \"as-is\", \"ob\": 1, \"tt\": 1}" "$r"
done
printf '{"tag": {"kind": "meta_end"}, "run": {"load_end": "%s"}}\n' \
  "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$results"

# ---- report -----------------------------------------------------------------
$py - "$results" <<'EOF'
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
meta = next(r["run"] for r in rows if r["tag"]["kind"] == "meta")
meta_end = next(r["run"] for r in rows if r["tag"]["kind"] == "meta_end")
tput = [r for r in rows if r["tag"]["kind"] == "tput"]
target = [r for r in rows if r["tag"]["kind"] == "target"]

def eps(r):
    return r["run"]["train_examples_per_s"] if r["run"] else None

def fmt(x, nd=0):
    return "failed" if x is None else f"{x:,.{nd}f}"

blas = next((r["run"]["blas_libs"] for r in tput
             if r["tag"]["side"] == "pytorch" and r["run"]), [])
torch_v = next((r["run"]["torch"] for r in tput
                if r["tag"]["side"] == "pytorch" and r["run"]), "?")
print(f"# echoflow train vs PyTorch {torch_v}, {meta['nproc']} cores"
      f"{' (--quick)' if meta['quick'] else ''}\n")
print(f"- load average at start {meta['load_start']}, at end "
      f"{meta_end['load_end']}")
print(f"- PyTorch BLAS (mapped in the process): "
      f"{', '.join(b.split('/')[-1] for b in blas) or '?'} "
      f"({'OpenBLAS' if any('openblas' in b for b in blas) else 'NOT OpenBLAS'});"
      f" echoflow links {meta['echoflow_blas']}")
print(f"- OPENBLAS_CORETYPE={meta['OPENBLAS_CORETYPE']}, "
      f"OPENBLAS_L2_SIZE={meta['OPENBLAS_L2_SIZE']} in the environment "
      f"(the 'unset' PyTorch runs drop both)")
print(f"- ~{meta['secs']} s timed per throughput configuration\n")

print("## Training throughput (examples/s, training steps only)\n")
print("| model | side | configuration | examples/s | echoflow / PyTorch-best |"
      " 1-min load after |")
print("|---|---|---|---:|---:|---:|")
summary = []
for model in dict.fromkeys(r["tag"]["model"] for r in tput):
    rs = [r for r in tput if r["tag"]["model"] == model]
    pt = [r for r in rs if r["tag"]["side"] == "pytorch" and r["run"]]
    best = max(pt, key=eps) if pt else None
    for r in rs:
        t = r["tag"]
        if t["side"] == "echoflow":
            ratio = (f"{eps(r) / eps(best):.2f}" if r["run"] and best else "-")
            extra = ""
            if r["run"]:
                extra = (f"; {r['run']['fresh']} fresh in "
                         f"{r['run']['train_time_s']:.1f} s, waited for data "
                         f"{100 * r['run']['consumer_wait_fraction']:.1f}%, "
                         f"final test loss {r['run']['final_loss']:.2f}")
            aug = ", random crop+flip" if model == "cnn" else ""
            print(f"| {model} | echoflow | --threads {t['threads']}{aug}"
                  f"{extra} | {fmt(eps(r))} | {ratio} | {t['load']:.1f} |")
    for r in rs:
        t = r["tag"]
        if t["side"] == "pytorch":
            mark = " **(best)**" if r is best else ""
            aug = ", no augmentation" if model == "cnn" else ""
            print(f"| {model} | PyTorch | env {t['env']}, OPENBLAS_NUM_THREADS="
                  f"{t['ob']}, set_num_threads({t['tt']}){aug}{mark} | "
                  f"{fmt(eps(r))} | | {t['load']:.1f} |")
    ef = [r for r in rs if r["tag"]["side"] == "echoflow" and r["run"]]
    efb = max(ef, key=eps) if ef else None
    asis = [eps(r) for r in pt if r["tag"]["env"] == "as-is"]
    unset = [eps(r) for r in pt if r["tag"]["env"] == "unset"]
    summary.append((model, efb, best, max(asis) if asis else None,
                    max(unset) if unset else None))

print("\n| model | echoflow best | PyTorch best | echoflow / PyTorch-best |"
      " PyTorch best, env as is | PyTorch best, OPENBLAS_CORETYPE/L2_SIZE unset |")
print("|---|---:|---:|---:|---:|---:|")
for model, efb, best, a, u in summary:
    ratio = f"{eps(efb) / eps(best):.2f}" if efb and best else "-"
    eft = f"{fmt(eps(efb))} (T={efb['tag']['threads']})" if efb else "failed"
    ptt = (f"{fmt(eps(best))} (OB={best['tag']['ob']}, torch={best['tag']['tt']},"
           f" env {best['tag']['env']})" if best else "failed")
    print(f"| {model} | {eft} | {ptt} | {ratio} | {fmt(a)} | {fmt(u)} |")
same = (meta["OPENBLAS_CORETYPE"] == "<unset>" and
        meta["OPENBLAS_L2_SIZE"] == "<unset>")
if same:
    print("\nNeither OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE was set, so the "
          "'as is' and 'unset' PyTorch runs are the same configuration: their "
          "difference is run-to-run noise.")

if target:
    print("\n## Fresh examples to 88% test accuracy (mlp, lr 0.03, Nesterov "
          "0.9, batch 128, eval every 10000 fresh on the 10k test set)\n")
    t0 = target[0]["tag"]
    ef_t = next((r["tag"]["threads"] for r in target
                 if r["tag"]["side"] == "echoflow"), "?")
    pt_t = next((r["tag"] for r in target if r["tag"]["side"] == "pytorch"), {})
    print(f"echoflow --threads {ef_t}; PyTorch OPENBLAS_NUM_THREADS="
          f"{pt_t.get('ob')}, set_num_threads({pt_t.get('tt')}), env "
          f"{pt_t.get('env')}. Time: training seconds, evaluation excluded.\n")
    print("| seed | echoflow fresh | steps | time s | PyTorch fresh | steps |"
          " time s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    seeds = list(dict.fromkeys(r["tag"]["seed"] for r in target))
    col = {"echoflow": {}, "pytorch": {}}
    for r in target:
        col[r["tag"]["side"]][r["tag"]["seed"]] = r["run"]

    def cells(run):
        if not run:
            return ["failed", "", ""]
        if not run["reached"]:
            return [f"not reached ({run['fresh']:,} fresh, acc "
                    f"{run['final_accuracy']:.4f})", "", ""]
        return [f"{run['fresh_to_target']:,}", f"{run['steps_to_target']:,}",
                f"{run['time_to_target_s']:.1f}"]
    for s in seeds:
        print(f"| {s} | " + " | ".join(cells(col["echoflow"].get(s)) +
                                       cells(col["pytorch"].get(s))) + " |")

    def agg(side, key, nd):
        v = [run[key] for run in col[side].values() if run and run["reached"]]
        if not v:
            return ["-", "-"]
        m = statistics.median(v)
        return [f"{m:,.{nd}f}", f"{min(v):,.{nd}f} - {max(v):,.{nd}f}"]
    med, rng = [], []
    for side in ("echoflow", "pytorch"):
        for key, nd in (("fresh_to_target", 0), ("steps_to_target", 0),
                        ("time_to_target_s", 1)):
            a = agg(side, key, nd)
            med.append(a[0])
            rng.append(a[1])
    print("| median | " + " | ".join(med) + " |")
    print("| range | " + " | ".join(rng) + " |")
    nre = sum(1 for side in col.values() for run in side.values()
              if run and not run["reached"])
    if nre:
        print(f"\n{nre} run(s) did not reach 88%; the median and range cover "
              "the runs that did.")
EOF
echo
echo "raw results: $results (stderr of each run alongside)"
