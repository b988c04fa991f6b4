#!/bin/bash
# resnet50 on the 2-core Intel Xeon VM (Emerald Rapids), 2026-11-29 (second session): tuned again with the weights
# of 1x1 convolutions packed in four streams (WEIGHT_STREAMS; xgb, 1450 trials = 50 per task, seed 0, then confirmed
# with --confirm 5), and both builds against ONNX Runtime at one and two threads (summary.md).
# REC holds the gunzipped records: new0c.jsonl = ../confirm/resnet50-new0c.jsonl.gz (tuned with one stream),
# st0c.jsonl = resnet50-st0c.jsonl.gz here.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/resnet50-xeon/streams}; REC=${REC:-/tmp/r50}
tiletune model tune resnet50 -s xgb --trials 1450 --seed 0 -r $REC/st0.jsonl > $OUT/tune-st0.log
cp $REC/st0.jsonl $REC/st0c.jsonl
tiletune model tune resnet50 -s xgb --trials 1450 --seed 0 -r $REC/st0c.jsonl --confirm 5 > $OUT/confirm-st0c.log
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC/new0c.jsonl -r $REC/st0c.jsonl \
    --threads 1,2 --rounds 3 > $OUT/threads.md
# order-prototype.md and the prefetch rows of summary.md came from prototypes described there, not in the tree.
