#!/bin/bash
# MetaSchedule for mobilenetv2 on the 2-core Intel Xeon VM (Emerald Rapids, shared host), 2026-11-29, seventh
# session: the Fig. 9 model run.sh's loop had stopped before (bert-small's: ../../baselines/ms/). tune_relax at xgb's
# budget (50 trials per task: 1550), not paused, timed once after its tuning, then ONNX Runtime and our build
# alternating in 3 rounds, each method in its own process (the steps of ../../../fig9-zen4/metaschedule/run.sh;
# run-mobilenetv2.log). Our records: the final code's from no records, ../../fig9-final/mobilenetv2-xgb.jsonl.gz.
cd "$(dirname "$0")/../../../../.."
gunzip -c benchmarks/out/fig9-xeon/fig9-final/mobilenetv2-xgb.jsonl.gz > /tmp/mobilenetv2-final.jsonl
OUT=benchmarks/out/fig9-xeon/fig9-1129/metaschedule MODEL=mobilenetv2 TRIALS=1550 REC=/tmp/mobilenetv2-final.jsonl \
    MS_TIMEOUT=4800 bash benchmarks/out/fig9-zen4/metaschedule/run.sh
