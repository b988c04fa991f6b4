#!/bin/bash
# A weight no column block fits gets a constructive start (docs/decisions/panel-order.md, "A weight no column block
# fits"), 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-30: long_reduction.py's two linear layers tuned
# from no records (xgb, 50 trials per task, seed 0) by the code before (eccd5a6, in a worktree) and after, then both
# builds alive in one process taking turns (inmodel_calls.py --lib, minima per call over 8 rounds of 20 inferences).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
work="${WORK:-/tmp/blocked-start}"
mkdir -p "$work" && cd "$work"
[ -d before ] || git -C "$repo" worktree add "$work/before" eccd5a6
export TVM_NUM_THREADS=2
model="$here/long_reduction.py:make"
(cd before && PYTHONPATH=. python -m tiletune.cli model tune "$model" -r "$work/before.jsonl" --trials 100 --seed 0 \
    > "$here/tune-before.log" 2>&1)
(cd "$repo" && python -m tiletune.cli model tune "$model" -r "$work/after.jsonl" --trials 100 --seed 0 \
    > "$here/tune-after.log" 2>&1)
(cd before && PYTHONPATH=. python -m tiletune.cli model build "$model" -r "$work/before.jsonl" -o "$work/before.so")
(cd "$repo" && python -m tiletune.cli model build "$model" -r "$work/after.jsonl" -o "$work/after.so")
python "$repo/benchmarks/research/in_model/inmodel_calls.py" --model "$model" --lib before.so --lib after.so --runs 20 \
    --rounds 8 > "$here/two-builds.md"
gzip -9c "$work/before.jsonl" > "$here/before.jsonl.gz"
gzip -9c "$work/after.jsonl" > "$here/after.jsonl.gz"
