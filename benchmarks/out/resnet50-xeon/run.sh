#!/bin/bash
# resnet50 on the 2-core Intel Xeon VM (Emerald Rapids, LLVM's sapphirerapids), tuned after the unroll floor (xgb, 1450
# trials = 50 per task, seeds 0 and 1; REC/resnet50-sSEED.jsonl, the gunzipped records here), each build against
# ONNX Runtime in 3 rotating rounds, each method in its own process.
#   tiletune model tune resnet50 -s xgb --trials 1450 --seed S -r REC/resnet50-sS.jsonl
cd "$(dirname "$0")/../../.."; OUT=${OUT:-benchmarks/out/resnet50-xeon}; REC=${REC:-/tmp/r50f}
for r in ${ROUNDS:-1 2 3}; do
  set -- s0 s1 onnxruntime; [ $((r % 2)) = 0 ] && set -- onnxruntime s1 s0
  for meth in "$@"; do
    d=$OUT/r$r/resnet50-$meth; mkdir -p $d
    case $meth in onnxruntime) args="--methods $meth";; *) args="-r $REC/resnet50-$meth.jsonl --methods tiletune";; esac
    timeout 600 tiletune model bench resnet50 $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r resnet50 $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done; done
echo done
