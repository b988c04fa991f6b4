#!/usr/bin/env bash
# resnet50's convolutions class by class against ONNX Runtime's, both sides alive and alternating (20 rounds of 5
# inferences each), minima over the 100 inferences of each side; the Fig. 9 records of 2026-11-29, the pads fused.
set -euo pipefail
cd "$(dirname "$0")/../../../research"
OUT=../out/resnet50-xeon/convs-alternating
for t in 2 1; do
  python convs_vs_ort.py --model resnet50 -r ../out/fig9-xeon/fig9-1129/resnet50-xgb.jsonl.gz --out /tmp/cvo-${t}t \
      --runs 5 --rounds 20 --threads $t --stat min
  cp /tmp/cvo-${t}t/convs-vs-ort.md $OUT/convs-${t}t.md
  cp /tmp/cvo-${t}t/ours.json $OUT/ours-${t}t.json; cp /tmp/cvo-${t}t/ort.json $OUT/ort-${t}t.json
done
