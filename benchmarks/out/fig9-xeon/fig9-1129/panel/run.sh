#!/usr/bin/env bash
# The panel order (docs/decisions/panel-order.md) on gpt2, 2026-11-29, the 2-core Intel Xeon VM (shared host, a busy
# hour: the same kernel 2.2-6 ms between minutes). MetaSchedule's tuning (../metaschedule/) was paused (SIGSTOP)
# during every step here. /tmp/gpt2-c5.jsonl: ../gpt2-xgb.jsonl.gz + ../confirm5/added-gpt2.jsonl.gz.
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
OUT=benchmarks/out/fig9-xeon/fig9-1129/panel
F=benchmarks/out/fig9-xeon/fig9-1129
zcat $F/gpt2-xgb.jsonl.gz $F/confirm5/added-gpt2.jsonl.gz > /tmp/gpt2-c5.jsonl
# 1. the down-projection's configurations side by side, cold (task_configs-ffn2-*.txt; the first run with
#    MetaSchedule paused, the second too)
TVM_NUM_THREADS=2 python benchmarks/research/in_model/task_configs.py --model gpt2 --task fused_matmul5_add4_add1 \
    -r /tmp/gpt2-c5.jsonl -c '{"tile_i0":[1,16,1,8],"tile_i1":[8,2,1,48]}' -c '{"tile_i0":[1,16,1,8],"tile_i1":[16,1,1,48]}' \
    --cold --rounds 8 --calls 20 > $OUT/task_configs-ffn2.txt
# resnet50's 1x1 1024 -> 256 at 14x14, its best and that in the panel order
zcat benchmarks/out/resnet50-xeon/winograd/resnet50-xgb-winograd.jsonl.gz \
    benchmarks/out/resnet50-xeon/winograd/confirm5/added.jsonl.gz > /tmp/resnet50-c5.jsonl
TVM_NUM_THREADS=2 python benchmarks/research/in_model/task_configs.py --model resnet50 --task fused_conv2d13_add10_relu7 \
    -r /tmp/resnet50-c5.jsonl -c '{"tile_yy":[1,7,1,2]}' --cold --rounds 8 --calls 30 > $OUT/task_configs-resnet50-1024-256.txt
# 2. a fresh tuning with the new code (panel starts, panel candidate in the confirmation): gpt2-xgb-panel.jsonl.gz
tiletune model tune gpt2 -s xgb --trials 400 --seed 0 -r /tmp/gpt2-p2.jsonl -q > $OUT/tune-gpt2-fresh.log
python benchmarks/research/in_model/threads_vs_ort.py --model gpt2 -r /tmp/gpt2-c5.jsonl -r /tmp/gpt2-p2.jsonl --alternate \
    --rounds 10 --calls 10 --threads 2 > $OUT/gpt2-fresh-tuning-2t.md
# 3. the committed records run again with the first version of the code (the confirmation added the panel order of
#    the best candidate only; the down-projection's replay diverges at its new starts: 112 trials measured anew within
#    the same budget): added-gpt2-c6.jsonl.gz
cp /tmp/gpt2-c5.jsonl /tmp/gpt2-c6.jsonl
tiletune model tune gpt2 -s xgb --trials 400 --seed 0 -r /tmp/gpt2-c6.jsonl -q > $OUT/tune-gpt2-c6.log
python benchmarks/research/in_model/threads_vs_ort.py --model gpt2 -r /tmp/gpt2-c5.jsonl -r /tmp/gpt2-c6.jsonl --alternate \
    --rounds 12 --calls 10 --threads 2 > $OUT/gpt2-c6-2t.md
# 4. in the whole model: the confirmed build against the same with the down-projection in the panel order alone
python benchmarks/research/in_model/build_swap.py gpt2 /tmp/gpt2-c5.jsonl /tmp/c5.so
python benchmarks/research/in_model/build_swap.py gpt2 /tmp/gpt2-c5.jsonl /tmp/panel.so \
    '{"fused_matmul5": {"tile_i0": [1, 16, 1, 8], "tile_i1": [16, 1, 1, 48]}}'
TVM_NUM_THREADS=2 python benchmarks/research/in_model/builds_alternate.py gpt2 /tmp/c5.so /tmp/panel.so --rounds 10 \
    > $OUT/gpt2-swap-2t.txt
# 5. the four models' confirmed records run again with the final code (the panel orders of all five candidates
#    confirmed): added-MODEL-c7.jsonl.gz, tune-MODEL-c7.log; /tmp/MODEL-c5.jsonl as ../confirm5/run.sh makes them
for spec in gpt2:400 bert-small:400 mobilenetv2:1550 resnet50:1238; do
  m=${spec%%:*}; cp /tmp/$m-c5.jsonl /tmp/$m-c7.jsonl
  tiletune model tune $m -s xgb --trials ${spec##*:} --seed 0 -r /tmp/$m-c7.jsonl -q > $OUT/tune-$m-c7.log
done
# 6. both builds of each model against ONNX Runtime, PyTorch eager and torch.compile, every side in its own process
for m in gpt2 resnet50 bert-small mobilenetv2; do
  c=20; [[ $m == bert-small || $m == gpt2 ]] && c=10
  python benchmarks/research/in_model/threads_vs_ort.py --model $m -r /tmp/$m-c5.jsonl -r /tmp/$m-c7.jsonl --alternate \
      --rounds 12 --calls $c --threads 2 --baselines torch,torch-compile > $OUT/$m-all.md
done
