#!/bin/bash
# The records: `tiletune model tune MODEL -r records/MODEL.jsonl` with --trials 192 (bert-small) or 64 --confirm 0
# (resnet50), 64 (gpt2, mobilenetv2), on this machine; gzipped here.
set -e
OUT=${OUT:-/tmp/torch-compile}
python benchmarks/goals/torch_compile.py --out $OUT --models bert-small,gpt2,mobilenetv2,resnet50 --rounds 3 \
    --records benchmarks/out/torch-compile/records/{model}.jsonl.gz
# background mode (background.json): python benchmarks/goals/torch_compile.py --out $OUT --models bert-small \
#     --engines ours,eager --rounds 1 --background 180; cp $OUT/background.json benchmarks/out/torch-compile/
gzip -9n -c $OUT/results.jsonl > benchmarks/out/torch-compile/results.jsonl.gz
cp $OUT/summary.md benchmarks/out/torch-compile/
