#!/bin/bash
# bert-small on the 2-core Intel Xeon VM: MetaSchedule's tune_relax at 400 trials (xgb's 50 per task), then our build
# (REC/bert-small-s0.jsonl, gunzipped from ../) and ONNX Runtime, each in its own process (`tiletune model bench`).
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-xeon/baselines}; REC=${REC:-/tmp/x9}
for meth in metaschedule tiletune onnxruntime; do
  d=$OUT/ms/bert-small-$meth; mkdir -p $d
  case $meth in tiletune) args="-r $REC/bert-small-s0.jsonl";; metaschedule) args="--metaschedule-trials 400";; *) args="";; esac
  timeout 3000 tiletune model bench bert-small $args --methods $meth --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
  echo "$(date +%T) bert-small $meth $(grep -E '^\| (tiletune|ONNX|MetaSchedule)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
done
echo done
