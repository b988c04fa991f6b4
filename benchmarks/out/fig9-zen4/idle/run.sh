#!/bin/bash
# Fig. 9 against ONNX Runtime on a quiet machine: each model's best records (bert-small gensor, gpt2 xgb,
# mobilenetv2 dwpad/, resnet50 cold/; gunzipped into REC as MODEL.jsonl), ours and ONNX Runtime alternating
# in ROUNDS rotating rounds, then PyTorch eager and torch.compile once; each method in its own process.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-zen4/idle}; REC=${REC:-/tmp/idle}
bench() {  # round model method
  d=$OUT/r$1/$2-$3; mkdir -p $d
  case $3 in ours) args="-r $REC/$2.jsonl --methods tiletune";; *) args="--methods $3";; esac
  timeout 900 tiletune model bench $2 $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
  echo "$(date +%T) r$1 $2 $3 $(grep -E '^\| (tiletune|ONNX|PyTorch|torch)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
}
for r in ${ROUNDS:-1 2 3}; do for m in ${MODELS:-bert-small gpt2 mobilenetv2 resnet50}; do
  if [ $(( r % 2 )) = 1 ]; then bench $r $m ours; bench $r $m onnxruntime; else bench $r $m onnxruntime; bench $r $m ours; fi
done; done
for m in ${BASE_MODELS:-bert-small gpt2 mobilenetv2 resnet50}; do for meth in ${BASE:-torch torch-compile}; do bench 0 $m $meth; done; done
echo done
