#!/usr/bin/env bash
# resnet50's stride-1 3x3 convolutions by Winograd's transforms (tiletune/model/winograd.py: F(4x4, 3x3) at 56x56 and
# 28x28, F(2x2, 3x3) at 14x14 and 7x7) against the same model with them direct, ONNX Runtime, PyTorch eager and
# torch.compile: every side alive in its own process, taking turns (threads_vs_ort.py --alternate).
# Records (resnet50-xgb-winograd.jsonl.gz): the Fig. 9 run's (../../fig9-xeon/fig9-1129/, xgb, 50 trials per task)
# plus the batched matmul tasks of the transforms, tuned with xgb by tune_model on those tasks alone: the F(2x2)
# products of the four stages (200 trials, the gradient scheduler sharing them), then the two F(4x4) ones (100).
# On these records `tiletune model tune resnet50 -s xgb --trials 1238 -r REC` (1238: the trials of the 29 tasks this
# build has) recalls them, measures 73 more where xgb's replay diverges and confirms (the default since confirm5/).
# f2-only/: the same sides before F(4x4) (F4_MAX_BYTES = 0), F(2x2) at every stage.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/out/resnet50-xeon/winograd
REC=/tmp/resnet50-xgb-winograd.jsonl
zcat $OUT/resnet50-xgb-winograd.jsonl.gz > $REC
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC -r NHWC+direct=$REC --alternate --rounds 15 \
    --calls 20 --threads 2 --baselines torch,torch-compile > $OUT/resnet50-all-2t.md
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC -r NHWC+direct=$REC --alternate --rounds 12 \
    --calls 10 --threads 1 > $OUT/resnet50-1t.md
# the builds with F(4x4) and with F(2x2) everywhere, alternating in one process; each kernel call in the model
#   tiletune model build resnet50 -r $REC -o F4.so   (F2.so: with winograd.F4_MAX_BYTES = 0)
#   TVM_NUM_THREADS=2 python benchmarks/research/in_model/builds_alternate.py resnet50 F4.so F2.so --rounds 10  > f4-vs-m2-2t.txt
#   TVM_NUM_THREADS=1 python benchmarks/research/in_model/inmodel_calls.py --model resnet50 -r $REC --runs 20  > inmodel-f4-1t.md
# class by class against ONNX Runtime, both sides alternating (a Winograd convolution's class: its two transforms and
# its product)
for t in 2 1; do
  python benchmarks/research/in_model/convs_vs_ort.py --model resnet50 -r $REC --out $OUT/convs-${t}t --runs 5 --threads $t \
      --stat min --rounds 20
done
