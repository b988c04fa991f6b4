#!/bin/bash
# Fig. 9's four models on the 2-core Intel Xeon VM (Emerald Rapids): our builds (the xgb records of ../ and of
# ../../resnet50-xeon/, 50 trials per task, seed 0; REC holds them gunzipped) against ONNX Runtime, PyTorch eager and
# torch.compile, each method in its own process (`tiletune model bench`, 10 samples of >= 200 ms, median), the
# methods' order rotated per model and round.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-xeon/baselines}; REC=${REC:-/tmp/x9}
METHODS=(tiletune onnxruntime torch torch-compile)
for r in ${ROUNDS:-1}; do
  i=0
  for model in ${MODELS:-bert-small gpt2 mobilenetv2 resnet50}; do
    i=$((i + 1)); k=$(( (i + r) % 4 )); order=("${METHODS[@]:$k}" "${METHODS[@]:0:$k}")
    for meth in "${order[@]}"; do
      d=$OUT/r$r/$model-$meth; mkdir -p $d
      case $meth in tiletune) args="-r $REC/$model-s0.jsonl";; *) args="";; esac
      timeout 900 tiletune model bench $model $args --methods $meth --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
      echo "$(date +%T) r$r $model $meth $(grep -E '^\| (tiletune|ONNX|PyTorch|torch)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
    done; done; done
echo done
