#!/bin/bash
# Weights of a width the vectors do not divide, padded (docs/decisions/pad-widths.md), 2-core Intel Xeon VM (Emerald
# Rapids, shared host), 2026-11-30: lm_head.py's two LM heads (768 -> 50,257 and -> 50,304) tuned from no records
# (xgb, 50 trials per task, seed 0) by the code before (tune-before.log; the commit before the padding, 4a14654, in
# a worktree) and after (tune-after.log), both builds alive in one process taking turns (two-builds.md,
# inmodel_calls.py --lib, minima per call over 6 rounds of 10; kernel names differ: before, `matmul` is the 50,257
# head and `matmul1` the 50,304 one; after, `fused_matmul_strided_slice` the 50,257 head and `matmul` the 50,304 one).
# tune-vit-rows.log: vit_rows.py's 197 and 200 rows tuned the same way (rows are not padded).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
work="${WORK:-/tmp/pad-widths}"
mkdir -p "$work" && cd "$work"
[ -d before ] || git -C "$repo" worktree add "$work/before" 4a14654
export TVM_NUM_THREADS=2
model="$here/lm_head.py:make"
(cd before && PYTHONPATH=. python -m tiletune.cli model tune "$model" -r "$work/before.jsonl" --trials 100 --seed 0 \
    > "$here/tune-before.log" 2>&1)
(cd "$repo" && python -m tiletune.cli model tune "$model" -r "$work/after.jsonl" --trials 100 --seed 0 \
    > "$here/tune-after.log" 2>&1)
(cd before && PYTHONPATH=. python -m tiletune.cli model build "$model" -r "$work/before.jsonl" -o "$work/before.so")
(cd "$repo" && python -m tiletune.cli model build "$model" -r "$work/after.jsonl" -o "$work/after.so")
python "$repo/benchmarks/research/in_model/inmodel_calls.py" --model "$model" --lib before.so --lib after.so --runs 10 \
    --rounds 6 > "$here/two-builds.md"
(cd "$repo" && python -m tiletune.cli model tune "$here/vit_rows.py:make" -r "$work/vit-rows.jsonl" --trials 100 \
    --seed 0 > "$here/tune-vit-rows.log" 2>&1)
for f in before after vit-rows; do gzip -9c "$work/$f.jsonl" > "$here/$f.jsonl.gz"; done
