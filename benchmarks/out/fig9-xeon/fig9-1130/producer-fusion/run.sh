#!/bin/bash
# Layout copies into the matmuls that read them (docs/decisions/producer-fusion.md), 2-core Intel Xeon VM (Emerald
# Rapids, shared host), 2026-11-30. The weight-block run's records (fig9-1129/weight-block/) built by the code before
# the change (489232c, in a worktree) and by this code, the merged tasks tuned (xgb, 50 trials per merged task, the
# top 5 confirmed; the other tasks keep their records), both libraries alive in one process taking turns, minima per
# call (inmodel_calls.py --lib). *-only.jsonl.gz: the merged tasks' records (gunzip to reuse).
#   resnet50-stem.md: resnet50 (fig9-final records) with the input transpose+pad merged into the stem (pads allowed
#                  for it by a patch of _is_injective_copy), the merged task tuned the same way.
#   gpt2-first.md: the first build, which also merged the attention output's transpose into the output projection
#                  (before the affine rule); gpt2.md: with the rule; bert-small.md; gpt2-key.md: the key's transpose
#                  merged too (the contiguity rule off), against gpt2.md's build.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
work="${WORK:-/tmp/producer-fusion}"
mkdir -p "$work" && cd "$work"
[ -d before ] || git -C "$repo" worktree add "$work/before" 489232c
export TVM_NUM_THREADS=2
wb="$repo/benchmarks/out/fig9-xeon/fig9-1129/weight-block"
calls="python $repo/benchmarks/research/in_model/inmodel_calls.py"
for m in gpt2 bert-small; do
  zcat "$wb/$m-xgb.jsonl.gz" > $m-old.jsonl
  (cd before && PYTHONPATH=. python -m tiletune.cli model build $m -r "$work/$m-old.jsonl" -o "$work/$m-old.so")
  python - "$m" <<'PY'
import dataclasses, sys
from tiletune.model.tasks import load_model_tasks
from tiletune.model.tuner import tune_model
from tiletune.target import parse_target
m = sys.argv[1]
_, tasks = load_model_tasks(m, parse_target(None), "NHWC")
sub = dataclasses.replace(tasks, kernels=[k for k in tasks.kernels if not k.tunable or ("transpose" in k.name and "matmul" in k.name)])
res = tune_model(sub, strategy="xgb", trials=50 * len(sub.tasks), records=f"{m}-new-only.jsonl", confirm=5)
for st in res.states: print(st.kernel.name, st.trials, st.best_s * 1e6)
PY
  cat $m-old.jsonl $m-new-only.jsonl > $m-new.jsonl
  python -m tiletune.cli model build $m -r $m-new.jsonl -o $m-new.so
done
$calls --model gpt2 --lib gpt2-old.so --lib gpt2-new.so --runs 10 --rounds 8 > "$here/gpt2.md"
$calls --model bert-small --lib bert-small-old.so --lib bert-small-new.so --runs 20 --rounds 8 > "$here/bert-small.md"
