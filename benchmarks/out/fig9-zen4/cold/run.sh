#!/bin/bash
cd /work/main; OUT=/tmp/fig9z4
for m in resnet50 mobilenetv2; do
  n=29; [ $m = mobilenetv2 ] && n=31
  t0=$(date +%s); timeout 900 tiletune model tune $m -s xgb --trials $((50*n)) -r $OUT/$m-xgbcold.jsonl -q > $OUT/$m-xgbcold.log 2>&1
  echo "$(date +%T) $m xgbcold rc=$? $(( $(date +%s)-t0 )) s"
done
for r in 1 2 3; do for m in resnet50 mobilenetv2; do
  for meth in xgbcold onnxruntime; do
    d=$OUT/cold/r$r/$m-$meth; mkdir -p $d
    case $meth in xgbcold) args="-r $OUT/$m-xgbcold.jsonl --methods tiletune";; *) args="--methods $meth";; esac
    timeout 600 tiletune model bench $m $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r $m $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ')"
  done; done; done
echo done
