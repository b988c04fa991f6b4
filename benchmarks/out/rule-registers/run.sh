#!/bin/bash
# Each model's tasks whose top construction changes when the template's register-tile rule alone decides the register
# level of an outer product (Model.rule_registers, docs/decisions/analytic-model.md), without and with, timed alone
# alternately (construct_change.py, 3 rounds); one log each. Then resnet50 tuned with the rule (xgb, 50 per task,
# seed 0, and confirmed: --confirm 5) against the same tuning without it (benchmarks/out/resnet50-xeon/confirm/) and
# ONNX Runtime at one thread (threads.md).
cd "$(dirname "$0")/../../.."
O=benchmarks/out/rule-registers; REC=${REC:-/tmp/r50}
for how in gensor roller; do
  for m in resnet50 mobilenetv2 bert-small; do
    python benchmarks/research/construct/construct_change.py $m --change rule-registers --method $how > $O/$m-$how.log 2>&1
  done
done
tiletune model tune resnet50 -s xgb --trials 1450 --seed 0 -r $REC/rr0.jsonl > $O/tune-rr0.log
cp $REC/rr0.jsonl $REC/rr0c.jsonl
tiletune model tune resnet50 -s xgb --trials 1450 --seed 0 -r $REC/rr0c.jsonl --confirm 5
# REC/new0*.jsonl: benchmarks/out/resnet50-xeon/confirm/resnet50-new0c.jsonl.gz gunzipped (new0: without its
# confirmation records, grep -v '"strategy": "confirm"')
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC/rr0c.jsonl -r $REC/new0c.jsonl \
    -r $REC/rr0.jsonl -r $REC/new0.jsonl --threads 1 --rounds 2 > $O/threads.md
