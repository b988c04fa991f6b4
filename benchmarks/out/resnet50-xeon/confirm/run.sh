#!/bin/bash
# resnet50 on the 2-core Intel Xeon VM (Emerald Rapids), 2026-11-28 (evening): two more tunings (xgb, 1450 trials =
# 50 per task, seeds 0 and 1), each confirmed (--confirm 5 and 3), the builds against ONNX Runtime at one and two
# threads, the convolutions class by class (minima), and the kernel probes of summary.md.
# REC holds the gunzipped records; a build without its confirmation: grep -v '"strategy": "confirm"' FILE.
cd "$(dirname "$0")/../../../.."; OUT=${OUT:-benchmarks/out/resnet50-xeon/confirm}; REC=${REC:-/tmp/r50}
for s in 0 1; do
  tiletune model tune resnet50 -s xgb --trials 1450 --seed $s -r $REC/new$s.jsonl > $OUT/tune-new$s.log
done
cp $REC/new0.jsonl $REC/new0c.jsonl; cp $REC/new1.jsonl $REC/new1c3.jsonl
tiletune model tune resnet50 -s xgb --trials 1450 --seed 0 -r $REC/new0c.jsonl --confirm 5   # confirm-new0c.log
tiletune model tune resnet50 -s xgb --trials 1450 --seed 1 -r $REC/new1c3.jsonl --confirm 3  # confirm-new1c3.log
# REC/s0.jsonl: benchmarks/out/resnet50-xeon/resnet50-s0.jsonl.gz, gunzipped
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC/s0.jsonl -r $REC/new0.jsonl \
    -r $REC/new0c.jsonl --threads 1,2 --rounds 2 > $OUT/threads-1.md
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r $REC/new1.jsonl -r $REC/new1c3.jsonl \
    -r $REC/new0c.jsonl --threads 1,2 --rounds 2 > $OUT/threads-2.md
python benchmarks/research/in_model/convs_vs_ort.py --model resnet50 -r $REC/s0.jsonl --out $OUT/convs-min --runs 40 \
    --threads 1 --stat min
# model-polish.md: before the register-level fix (Model.rule_registers off); model-polish-after.md: with it
python benchmarks/research/construct/model_polish.py --model resnet50 > $OUT/model-polish-after.md
# the kernel probes (summary.md), e.g. the 1x1 convolution 1024 -> 512 at 14x14:
TVM_NUM_THREADS=1 python benchmarks/research/in_model/task_configs.py --model resnet50 --task fused_conv2d18_add13_relu9 \
    -r $REC/s0.jsonl -c '{"tile_ff":[16,1,1,32],"tile_yy":[1,2,1,7],"tile_xx":[1,7,1,2],"tile_rc":[4,256],"unroll":64}' \
    -c '{"tile_ff":[2,8,1,32],"tile_yy":[1,2,1,7],"tile_xx":[1,7,1,2],"tile_rc":[1,1024],"unroll":64}'
