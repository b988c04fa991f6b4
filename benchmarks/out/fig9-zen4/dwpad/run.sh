#!/bin/bash
# mobilenetv2 with its depthwise convolutions keeping their padding (layout.PAD_GROUPED = False): the cold-timed
# xgb records of cold/ continued (model tune -s xgb --trials 1550: only the 10 depthwise tasks were new), then
# ours and ONNX Runtime in 5 rotating rounds, each in its own process. REC: the gunzipped records.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/fig9-zen4/dwpad}; REC=${REC:-/tmp/p/mnv2-nopad.jsonl}
for r in ${ROUNDS:-1 2 3 4 5}; do
  for meth in ours onnxruntime; do
    [ $(( r % 2 )) = 0 ] && meth=$([ $meth = ours ] && echo onnxruntime || echo ours)
    d=$OUT/r$r/mobilenetv2-$meth; mkdir -p $d
    case $meth in ours) args="-r $REC --methods tiletune";; *) args="--methods $meth";; esac
    timeout 600 tiletune model bench mobilenetv2 $args --out $d --repeat 10 --min-repeat-ms 200 > $d.log 2>&1
    echo "$(date +%T) r$r $meth $(grep -E '^\| (tiletune|ONNX)' $d.log | cut -d'|' -f2,3 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done; done
echo done
