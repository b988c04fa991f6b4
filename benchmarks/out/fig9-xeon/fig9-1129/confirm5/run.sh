#!/usr/bin/env bash
# The other three Fig. 9 models with every task's top 5 confirmed (model tune's default since 2026-11-29,
# docs/decisions/model-confirm.md), against their builds as tuned (../MODEL-xgb.jsonl.gz) and ONNX Runtime, every side
# alive in its own process, taking turns. added-MODEL.jsonl.gz: what the tune command appended (gpt2, bert-small: the
# 80 confirmations only; mobilenetv2: 310 confirmations and 539 xgb trials, the replay of xgb's decisions not being
# exact, within the same budget of 1550 trials); tune-MODEL.log its output. resnet50: ../../../resnet50-xeon/winograd/confirm5/.
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
OUT=benchmarks/out/fig9-xeon/fig9-1129/confirm5
for m in gpt2 mobilenetv2 bert-small; do
  zcat benchmarks/out/fig9-xeon/fig9-1129/$m-xgb.jsonl.gz > /tmp/$m-orig.jsonl
  cp /tmp/$m-orig.jsonl /tmp/$m-c5.jsonl
  python -m tiletune.cli model tune $m -s xgb --trials $(wc -l < /tmp/$m-orig.jsonl) -r /tmp/$m-c5.jsonl --confirm 5 -q \
      > $OUT/tune-$m.log
  c=20; [[ $m == bert-small || $m == gpt2 ]] && c=10
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r /tmp/$m-orig.jsonl -r /tmp/$m-c5.jsonl --alternate \
      --rounds 15 --calls $c --threads 2 > $OUT/$m-2t.md
done
# the four confirmed builds with PyTorch eager and torch.compile as sides of their own (MODEL-all.md; resnet50's records:
# ../../../resnet50-xeon/winograd/resnet50-xgb-winograd.jsonl.gz + ../../../resnet50-xeon/winograd/confirm5/added.jsonl.gz)
W=benchmarks/out/resnet50-xeon/winograd
zcat $W/resnet50-xgb-winograd.jsonl.gz $W/confirm5/added.jsonl.gz > /tmp/resnet50-c5.jsonl
for m in resnet50 gpt2 mobilenetv2 bert-small; do
  c=20; [[ $m == bert-small || $m == gpt2 ]] && c=10
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r /tmp/$m-c5.jsonl --alternate --rounds 12 --calls $c \
      --threads 2 --baselines torch,torch-compile > $OUT/$m-all.md
done
