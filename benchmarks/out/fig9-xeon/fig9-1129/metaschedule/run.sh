#!/bin/bash
# MetaSchedule on the 2-core Intel Xeon VM (Emerald Rapids, shared host) for the three Fig. 9 models it had not been
# run on here (bert-small's: ../../baselines/ms/): tune_relax at xgb's budget (50 trials per task: gpt2 400,
# resnet50 1450, mobilenetv2 1550), timed once after its tuning, then ONNX Runtime and our confirmed build
# alternating in 3 rounds, each method in its own process (`tiletune model bench`; the steps of
# ../../../fig9-zen4/metaschedule/run.sh). Our records: /tmp/MODEL-c5.jsonl, made as ../confirm5/run.sh makes them
# (the xgb records + added-MODEL.jsonl.gz; resnet50's from ../../../resnet50-xeon/winograd/ + confirm5/added.jsonl.gz).
# 2026-11-29: gpt2 and resnet50 ran (run.log); the loop was stopped before mobilenetv2 (the session's time), which
# ran in the next session by run-mobilenetv2.sh. Both
# tunings were paused (SIGSTOP) for about 18 and 20 min while our builds were measured beside them (../panel/).
cd "$(dirname "$0")/../../../../.."
for m in ${MODELS:-gpt2 resnet50 mobilenetv2}; do
  case $m in gpt2) t=400;; resnet50) t=1450;; mobilenetv2) t=1550;; esac
  OUT=benchmarks/out/fig9-xeon/fig9-1129/metaschedule MODEL=$m TRIALS=$t REC=/tmp/$m-c5.jsonl MS_TIMEOUT=4800 \
      bash benchmarks/out/fig9-zen4/metaschedule/run.sh
done
