#!/bin/bash
# gpt2's FFN down-projection given a constructive start (docs/decisions/panel-order.md, "A weight the block rule
# refuses every construction of"), 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-30: gpt2 from no records
# (xgb, 50 trials per task, seed 0; records gzipped), every side alive at once taking turns (summary-alternate.md);
# then two-builds.md: half/'s records built by the code before (c6c9191, in a worktree) and these records, alive in
# one process taking turns (inmodel_calls.py --lib, minima per call over 8 rounds of 10 inferences).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
work="${WORK:-/tmp/ffn2-start}"
mkdir -p "$work" && cd "$work"
[ -d before ] || git -C "$repo" worktree add "$work/before" c6c9191
export TVM_NUM_THREADS=2
(cd "$repo" && python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-1130/ffn2-start --models gpt2 \
    --strategies xgb --search xgb --no-metaschedule --alternate 12 --calls 10)
zcat "$repo/benchmarks/out/fig9-xeon/fig9-1130/half/gpt2-xgb.jsonl.gz" > half.jsonl
zcat "$here/gpt2-xgb.jsonl.gz" > new.jsonl 2>/dev/null || cp "$here/gpt2-xgb.jsonl" new.jsonl
(cd before && PYTHONPATH=. python -m tiletune.cli model build gpt2 -r "$work/half.jsonl" -o "$work/half.so")
(cd "$repo" && python -m tiletune.cli model build gpt2 -r "$work/new.jsonl" -o "$work/new.so")
python "$repo/benchmarks/research/in_model/inmodel_calls.py" --model gpt2 --lib half.so --lib new.so --runs 10 --rounds 8 \
    > "$here/two-builds.md"
