#!/bin/bash
# gpt2's two latest builds timed in a quieter hour (load 0.4 before the start), 2-core Intel Xeon VM (Emerald Rapids,
# shared host), 2026-11-30 06:30 UTC: ffn2-start/'s and half/'s records, every side alive at once taking turns with
# ONNX Runtime, PyTorch eager and torch.compile (alternate-gpt2.md, 12 turns of 10 single inferences, two threads);
# then ffn2-start/'s build with TVM's pool threads spinning as by default and not at all (alternate-gpt2-spin.md).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
work="${WORK:-/tmp/quiet}"
mkdir -p "$work" && cd "$work"
zcat "$here/../ffn2-start/gpt2-xgb.jsonl.gz" > gpt2-ffn2.jsonl
zcat "$here/../half/gpt2-xgb.jsonl.gz" > gpt2-half.jsonl
export TVM_NUM_THREADS=2
python "$repo/benchmarks/research/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r gpt2-half.jsonl --threads 2 \
    --rounds 12 --calls 10 --alternate --baselines torch,torch-compile > "$here/alternate-gpt2.md"
python "$repo/benchmarks/research/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r NHWC+spin0=gpt2-ffn2.jsonl \
    --threads 2 --rounds 12 --calls 10 --alternate > "$here/alternate-gpt2-spin.md"
