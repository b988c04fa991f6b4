#!/bin/bash
# mobilenetv2 and resnet50 tuned from no records with this session's final code (producer fusion and the weight-block
# rule leave their tasks as they were: no merge, no 2-D weight with more than one row), 2-core Intel Xeon VM (Emerald
# Rapids, shared host), 2026-11-30: xgb, 50 trials per task, seed 0 (records gzipped here; gunzip them to resume), then
# every build, ONNX Runtime, PyTorch eager and torch.compile alive at once, each in its own process, 12 turns of 10
# single inferences (summary-alternate.md, alternate/).
cd "$(dirname "$0")/../../../../.."
python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-1130/cnn --models mobilenetv2,resnet50 \
    --strategies xgb --search xgb --no-metaschedule --alternate 12 --calls 10
