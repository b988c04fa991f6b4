#!/bin/bash
# resnet50 tuned three times on a quiet machine (xgb, 1450 trials = 50 per task, seeds 0, 1, 2; REC/resnet50-sSEED.jsonl,
# the gunzipped records here), each build against ONNX Runtime in 3 rotating rounds, each method in its own process.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-zen4/seeds}; REC=${REC:-/tmp/idle}
for r in ${ROUNDS:-1 2 3}; do
  set -- s0 s1 s2 onnxruntime; [ $((r % 2)) = 0 ] && set -- onnxruntime s2 s1 s0
  for meth in "$@"; do
    d=$OUT/r$r/resnet50-$meth; mkdir -p $d
    case $meth in s*) args="-r $REC/resnet50-$meth.jsonl --methods tiletune";; *) args="--methods $meth";; esac
    timeout 600 tiletune model bench resnet50 $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r resnet50 $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done; done
echo done
