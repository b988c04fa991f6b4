#!/usr/bin/env bash
# The pads taken into their producers against pad kernels: resnet50 from the Fig. 9 records of 2026-11-29.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/out/resnet50-xeon/padfusion
REC=benchmarks/out/fig9-xeon/fig9-1129/resnet50-xgb.jsonl.gz
SO=${SO:-/tmp/padfusion}
TVM_NUM_THREADS=2 python benchmarks/research/in_model/pad_fusion.py --model resnet50 -r $REC --out $SO --rounds 15 > $OUT/kernels-2t.md
TVM_NUM_THREADS=1 python benchmarks/research/in_model/pad_fusion.py --model resnet50 -r $REC --out $SO --rounds 15 > $OUT/kernels-1t.md
TVM_NUM_THREADS=2 python benchmarks/research/in_model/builds_alternate.py resnet50 $SO/resnet50-fused.so $SO/resnet50-padkernels.so --rounds 12 2>/dev/null > $OUT/alternate-2t.txt
TVM_NUM_THREADS=1 python benchmarks/research/in_model/builds_alternate.py resnet50 $SO/resnet50-padkernels.so $SO/resnet50-fused.so --rounds 8 2>/dev/null > $OUT/alternate-1t.txt
