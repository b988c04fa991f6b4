#!/bin/bash
# gpt2 tuned from no records with the weight-block rule's half-L2 block (docs/decisions/weight-block.md), 2-core Intel
# Xeon VM (Emerald Rapids, shared host), 2026-11-30: xgb, 50 trials per task, seed 0, then every side alive at once
# taking turns (summary-alternate.md); then this build and final/'s two gpt2 builds (the whole-L2 block) as sides of
# one run with ONNX Runtime (three-builds.md). Records gzipped: gunzip final/*.jsonl.gz, final/again/*.jsonl.gz and
# half/*.jsonl.gz first.
cd "$(dirname "$0")/../../../../.."
out=benchmarks/out/fig9-xeon/fig9-1130
python benchmarks/papers/model_fig9.py --out $out/half --models gpt2 --strategies xgb --search xgb --no-metaschedule \
    --alternate 12 --calls 10
python benchmarks/research/in_model/threads_vs_ort.py --model gpt2 -r NHWC=$out/final/gpt2-xgb.jsonl \
    -r NHWC=$out/final/again/gpt2-xgb.jsonl -r NHWC=$out/half/gpt2-xgb.jsonl --alternate --rounds 12 --calls 10 \
    --threads 2 > $out/half/three-builds.md
# bert-small from no records with the same code (half/bert-small-xgb.jsonl.gz, summary-alternate.md's second table)
python benchmarks/papers/model_fig9.py --out $out/half --models bert-small --strategies xgb --search xgb --no-metaschedule \
    --alternate 12 --calls 10
# again/: gpt2 once more from no records, the same command
python benchmarks/papers/model_fig9.py --out $out/half/again --models gpt2 --strategies xgb --search xgb --no-metaschedule \
    --alternate 12 --calls 10
