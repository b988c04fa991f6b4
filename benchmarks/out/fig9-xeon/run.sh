#!/bin/bash
# bert-small, gpt2 and mobilenetv2 on the 2-core Intel Xeon VM (Emerald Rapids), tuned there (xgb, 50 trials per task: 400 for the transformers, 1550 for mobilenetv2,
# seed 0; REC/MODEL-s0.jsonl, the gunzipped records here), each build against ONNX Runtime in 3 rotating rounds,
# each method in its own process.
#   tiletune model tune MODEL -s xgb --trials 400|1550 --seed 0 -r REC/MODEL-s0.jsonl
cd "$(dirname "$0")/../../.."; OUT=${OUT:-benchmarks/out/fig9-xeon}; REC=${REC:-/tmp/x9}
for r in ${ROUNDS:-1 2 3}; do
  for model in ${MODELS:-bert-small gpt2}; do
    set -- tiletune onnxruntime; [ $((r % 2)) = 0 ] && set -- onnxruntime tiletune
    for meth in "$@"; do
      d=$OUT/r$r/$model-$meth; mkdir -p $d
      case $meth in onnxruntime) args="";; *) args="-r $REC/$model-s0.jsonl";; esac
      timeout 600 tiletune model bench $model $args --methods $meth --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
      echo "$(date +%T) r$r $model $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
    done; done; done
echo done
