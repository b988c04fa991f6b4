#!/bin/bash
# Fig. 9 on the 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-29, sixth session, with the final code of
# the session (the panel order; model tune confirms the top 5 by default): the four models tuned from no records (xgb,
# 50 trials per task, seed 0; records gzipped here, model_fig9.py resumes from them), then every build, ONNX Runtime,
# PyTorch eager and torch.compile alive at once, each in its own process, 12 turns of 10 single inferences each
# (summary-alternate.md, alternate/). MetaSchedule: ../fig9-1129/metaschedule/ (not in this run).
cd "$(dirname "$0")/../../../.."
python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9-xeon/fig9-final --strategies xgb --search xgb \
    --no-metaschedule --alternate 12 --calls 10
