#!/bin/bash
# A software prefetch of a model weight's next reduction block, tried and not kept (docs/decisions/weight-streams.md,
# "Rejected: a software prefetch"), 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-30.
# benchmarks/research/weight_prefetch.diff of commit 826508f is its last version (it applies to c6c9191; the paths
# below are that commit's): tiletune/schedules/prefetch.py, the
# `prefetch` knob (a record without it means 0), the blocked constructions in the start, their tests.
#   First version (the diff without the knob: the prefetch wherever the loop nest had row tiles under R0 and two blocks
#   took at most half the L2):
#   summary-alternate.md, alternate/: gpt2 tuned from no records (xgb, 50 trials per task; gpt2-xgb.jsonl.gz): none of
#       its chosen matmuls has row tiles under R0, so none prefetches.
#   gpt2-blocked.md: those records built three ways, alive in one process taking turns (inmodel_calls.py --lib, minima
#       per call over 8 rounds of 10 inferences): build 0 as tuned; build 1 the four weight matmuls swapped to blocked
#       configurations (blocked-swap.json: 16 row tiles of 8 under R0, 48-column panels, 128 reduction steps per block)
#       by the code before; build 2 the same swap with the prefetch.
#   resnet50.md: fig9-1130/cnn's resnet50 records built by the code before (build 0) and by the first version (build 1),
#       8 rounds of 20 inferences, minima per call.
#   Last version (the diff as it is):
#   blocked/: gpt2 tuned from no records (its summary-alternate.md), then blocked/three-builds.md: half/'s build (the
#       code before), this tuning's build, and the first version's tuning's build, in one process taking turns.
# To rerun: two checkouts of c6c9191, one with the diff applied (git apply) and one without ("before"); run the
# model_fig9.py lines in the first, the builds as marked.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
work="${WORK:-/tmp/weight-prefetch}"
with="${WITH:?a checkout of c6c9191 with weight_prefetch.diff applied}"
before="${BEFORE:?a checkout of c6c9191}"
mkdir -p "$work" && cd "$work"
export TVM_NUM_THREADS=2
calls="python $before/benchmarks/research/inmodel_calls.py"
(cd "$with" && python benchmarks/model_fig9.py --out "$work/blocked" --models gpt2 --strategies xgb --search xgb \
    --no-metaschedule --alternate 12 --calls 10)
zcat "$here/gpt2-xgb.jsonl.gz" > first.jsonl
zcat "$here/blocked/gpt2-xgb.jsonl.gz" > blocked.jsonl
zcat "$before/benchmarks/out/fig9-xeon/fig9-1130/half/gpt2-xgb.jsonl.gz" > half.jsonl
swap="$(cat "$here/blocked-swap.json")"
(cd "$with" && python -m tiletune.cli model build gpt2 -r "$work/first.jsonl" -o "$work/T.so" \
    && python -m tiletune.cli model build gpt2 -r "$work/blocked.jsonl" -o "$work/B.so" \
    && python benchmarks/research/build_swap.py gpt2 "$work/first.jsonl" "$work/G1.so" "$swap")
(cd "$before" && python benchmarks/research/build_swap.py gpt2 "$work/first.jsonl" "$work/G0.so" "$swap" \
    && python -m tiletune.cli model build gpt2 -r "$work/half.jsonl" -o "$work/half.so")
$calls --model gpt2 --lib T.so --lib G0.so --lib G1.so --runs 10 --rounds 8 > "$work/gpt2-blocked.md"
$calls --model gpt2 --lib half.so --lib B.so --lib T.so --runs 10 --rounds 8 > "$work/three-builds.md"
