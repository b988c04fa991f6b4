#!/bin/bash
# Fig. 9 on the 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-29: the four models tuned with xgb at 50
# trials per task (the issue's budget), then each build and ONNX Runtime, PyTorch eager and torch.compile timed in
# 3 rotating rounds, each method in its own process (summary-rounds.md; summary.md reads it). MetaSchedule was left
# out (its figures at 50 per task: ../../fig9-zen4/metaschedule/, ../summary.md). Records are committed gzipped;
# model_fig9.py resumes from them (a finished tuning is skipped).
cd "$(dirname "$0")/../../../.."
python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-1129 --strategies xgb --search xgb \
    --no-metaschedule --baselines torch,torch-compile,onnxruntime --rounds 3
# the CNNs by the minima of single inferences, right after (/tmp/MODEL-xgb.jsonl: MODEL-xgb.jsonl.gz, gunzipped)
for m in mobilenetv2 resnet50; do
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r /tmp/$m-xgb.jsonl --threads 2 --rounds 3 \
      > benchmarks/out/fig9-xeon/fig9-1129/threads-$m.md
done
# resnet50's convolutions class by class against ONNX Runtime's (minima of 40 runs), at two and at one thread
for t in 2 1; do
  python benchmarks/research/in_model/convs_vs_ort.py --model resnet50 -r /tmp/resnet50-xgb.jsonl \
      --out benchmarks/out/fig9-xeon/fig9-1129/convs-min-${t}t --runs 40 --threads $t --stat min
done
