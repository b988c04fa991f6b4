#!/bin/bash
# MetaSchedule (tune_relax at xgb's budget: 50 trials per task) on MODEL, timed once after its tuning, then
# ONNX Runtime and our xgb build (REC = the gunzipped ../MODEL-xgb.jsonl.gz) alternating in 3 rounds; each method
# in its own process (`tiletune model bench`). MS_TIMEOUT: seconds for MetaSchedule (default 3600).
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-zen4/metaschedule}
M=${MODEL:-gpt2}; TRIALS=${TRIALS:-400}; REC=${REC:-/tmp/$M-xgb.jsonl}
log() { echo "$(date +%T) $1 $(grep -E '^\| (tiletune|ONNX|MetaSchedule)' $2 | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"; }
timeout ${MS_TIMEOUT:-3600} tiletune model bench $M --methods metaschedule --metaschedule-trials $TRIALS --out $OUT/$M-ms \
    --repeat 10 --min-repeat-ms 200 > $OUT/$M-ms.log 2>&1; log "ms" $OUT/$M-ms.log
for r in 1 2 3; do
  for meth in $([ $((r % 2)) = 1 ] && echo "onnxruntime ours" || echo "ours onnxruntime"); do
    d=$OUT/$M-r$r-$meth
    case $meth in ours) args="-r $REC --methods tiletune";; *) args="--methods $meth";; esac
    timeout 900 tiletune model bench $M $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1; log "r$r $meth" $d.log
  done
done
echo done
