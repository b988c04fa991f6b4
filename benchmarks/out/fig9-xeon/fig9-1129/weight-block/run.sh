#!/bin/bash
# gpt2 and bert-small tuned from no records with the weight-block rule (docs/decisions/weight-block.md), 2-core Intel
# Xeon VM (Emerald Rapids, shared host), 2026-11-29, eighth session: xgb, 50 trials per task, seed 0 (records
# gzipped here; gunzip them to resume), then every build, ONNX Runtime, PyTorch eager and torch.compile alive at once,
# each in its own process, 12 turns of 10 single inferences (summary-alternate.md, alternate/). again/: gpt2 once
# more from no records, the same command.
cd "$(dirname "$0")/../../../../.."
python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-1129/weight-block --models gpt2,bert-small \
    --strategies xgb --search xgb --no-metaschedule --alternate 12 --calls 10
python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-1129/weight-block/again --models gpt2 \
    --strategies xgb --search xgb --no-metaschedule --alternate 12 --calls 10
