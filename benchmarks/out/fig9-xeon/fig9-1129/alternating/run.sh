#!/usr/bin/env bash
# The Fig. 9 builds against ONNX Runtime with every side alive at once, taking turns (threads_vs_ort.py --alternate),
# 2026-11-29, third session: the records of ../ (xgb, 50 trials per task), built with the code of this commit (the
# pads taken into their producers). Each side in its own process.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/out/fig9-xeon/fig9-1129/alternating
REC=benchmarks/out/fig9-xeon/fig9-1129
for m in resnet50 mobilenetv2; do
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r $REC/$m-xgb.jsonl.gz --alternate --rounds 15 --calls 20 \
      --threads 2,1 > $OUT/$m.md
done
for m in bert-small gpt2; do
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r $REC/$m-xgb.jsonl.gz --alternate --rounds 15 --calls 10 \
      --threads 2 > $OUT/$m.md
done
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC/resnet50-xgb.jsonl.gz --alternate --rounds 15 \
    --calls 20 --threads 2 > $OUT/resnet50-again-2t.md
# the same at two threads with PyTorch eager and torch.compile as sides of their own (MODEL-all.md)
for m in resnet50 mobilenetv2 bert-small gpt2; do
  c=20; [[ $m == bert-small || $m == gpt2 ]] && c=10
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r $REC/$m-xgb.jsonl.gz --alternate --rounds 15 --calls $c \
      --threads 2 --baselines torch,torch-compile > $OUT/$m-all.md
done
