#!/bin/bash
# mobilenetv2 on the 2-core Intel Xeon VM, tuned again after Gensor's vector steps (be34788; the model path's
# searches start from Gensor's and Roller's tops), against the build tuned before it (../mobilenetv2-s0.jsonl.gz)
# and ONNX Runtime: 3 rotating rounds, each in its own process (`tiletune model bench`).
#   tiletune model tune mobilenetv2 -s xgb --trials 1550 --seed 0 -r REC/mobilenetv2-a0.jsonl
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-xeon/gensor-align}; REC=${REC:-/tmp/x9}
MODEL=${MODEL:-mobilenetv2}; set -- a0 s0 onnxruntime
for r in ${ROUNDS:-1 2 3}; do
  for side in "$@"; do
    d=$OUT/r$r/$MODEL-$side; mkdir -p $d
    case $side in onnxruntime) args="--methods onnxruntime";; *) args="-r $REC/$MODEL-$side.jsonl --methods tiletune";; esac
    timeout 600 tiletune model bench $MODEL $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r $MODEL $side $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done
  set -- "${@:2}" "$1"  # rotate the order
done
echo done
