#!/bin/bash
# mobilenetv2 and resnet50 (cold-timed xgb records) against ONNX Runtime, 3 rotating rounds, after the default-schedule change
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-zen4/sched}
for r in ${ROUNDS:-1 2 3}; do for m in ${MODELS:-mobilenetv2 resnet50}; do
  for meth in xgbcold onnxruntime; do
    d=$OUT/r$r/$m-$meth; mkdir -p $d
    case $meth in xgbcold) args="-r ${REC:-/tmp/fig9z4}/$m-xgbcold.jsonl --methods tiletune";; *) args="--methods $meth";; esac
    timeout 600 tiletune model bench $m $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r $m $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done; done; done
echo done
