#!/bin/bash
# gpt2 with the q/k/v split read as strided slices (tiletune/model/split_slices.py), 2026-11-29, seventh session, on the
# 2-core Intel Xeon VM (Emerald Rapids, shared host). Two measurements, each side alive in its own process:
# 1. The split's gain alone: the same records (../../fig9-final/gpt2-xgb.jsonl.gz) built by the code before
#    (git archive eb6a217~1, PYTHONPATH, run from outside the repository) and after it, timed alternately in one
#    process (builds_alternate.py, 12 rounds of 5 samples >= 200 ms, two threads): split-alternate.txt.
# 2. Fig. 9 for gpt2 re-run from no records with this code (model_fig9.py, xgb at 50 trials per task, seed 0, then
#    --alternate 12: ours, ONNX Runtime, PyTorch eager and torch.compile taking turns of 10 single inferences;
#    records gzipped here after the run, summary-alternate.md, alternate/).
cd "$(dirname "$0")/../../../../.."
D=benchmarks/out/fig9-xeon/fig9-1129/split
gunzip -c benchmarks/out/fig9-xeon/fig9-final/gpt2-xgb.jsonl.gz > /tmp/gpt2-final.jsonl
rm -rf /tmp/snap-before && mkdir -p /tmp/snap-before /tmp/split && git archive eb6a217~1 | tar -x -C /tmp/snap-before
(cd /tmp && PYTHONPATH=/tmp/snap-before python -m tiletune.cli model build gpt2 -r /tmp/gpt2-final.jsonl \
    -o /tmp/split/gpt2-final-before.so)
python -m tiletune.cli model build gpt2 -r /tmp/gpt2-final.jsonl -o /tmp/split/gpt2-final-after.so
TVM_NUM_THREADS=2 python benchmarks/research/in_model/builds_alternate.py gpt2 /tmp/split/gpt2-final-before.so \
    /tmp/split/gpt2-final-after.so --rounds 12 > $D/split-alternate.txt
python benchmarks/papers/model_fig9.py --out $D --models gpt2 --strategies xgb --search xgb --no-metaschedule \
    --alternate 12 --calls 10
# 3. Every kernel call in the model, before and after, twice each in turn (inmodel_calls.py, 10 runs, minima per call):
for i in 1 2; do
  (cd /tmp && TVM_NUM_THREADS=2 PYTHONPATH=/tmp/snap-before python /tmp/snap-before/benchmarks/research/inmodel_calls.py \
      --model gpt2 -r /tmp/gpt2-final.jsonl --runs 10) > $D/inmodel-before-$i.md
  TVM_NUM_THREADS=2 python benchmarks/research/in_model/inmodel_calls.py --model gpt2 -r /tmp/gpt2-final.jsonl --runs 10 \
      > $D/inmodel-after-$i.md
done
# 4. The split build against ONNX Runtime and the torch baselines once more, later (alternate-again.md):
gunzip -c $D/gpt2-xgb.jsonl.gz > /tmp/gpt2-split.jsonl
python benchmarks/research/in_model/threads_vs_ort.py --model gpt2 -r /tmp/gpt2-split.jsonl --alternate --rounds 12 --calls 10 \
    --threads 2 --baselines torch,torch-compile > $D/alternate-again.md
# 5. The same with one busy loop beside both sides (three runnable threads on two cores; alternate-one-busy-loop.md):
(timeout 600 python -c "while True: pass" &); sleep 1
python benchmarks/research/in_model/threads_vs_ort.py --model gpt2 -r /tmp/gpt2-split.jsonl --alternate --rounds 8 --calls 10 \
    --threads 2 > $D/alternate-one-busy-loop.md; pkill -f "while True: pass"
# 6. TVM's pool spin count (docs/decisions/runtime-spin.md): three builds differing only in it, with ONNX Runtime, as
#    the machine was and beside one busy loop (spin-*.md):
gunzip -c benchmarks/out/fig9-xeon/fig9-final/mobilenetv2-xgb.jsonl.gz > /tmp/mobilenetv2-final.jsonl
for m in gpt2 mobilenetv2; do
  case $m in gpt2) R=/tmp/gpt2-split.jsonl; c=10; s=;; mobilenetv2) R=/tmp/mobilenetv2-final.jsonl; c=40; s=-mobilenetv2;; esac
  for load in idle one-busy-loop; do
    [ $load = one-busy-loop ] && { (timeout 900 python -c "while True: pass" &); sleep 1; }
    python benchmarks/research/in_model/threads_vs_ort.py --model $m -r NHWC=$R -r NHWC+spin0=$R -r NHWC+spin10000=$R \
        --alternate --rounds 8 --calls $c --threads 2 > $D/spin-$load$s.md
    pkill -f "while True: pass" || true
  done
done
# 5b. (run before step 6) step 5 with TVM_THREAD_POOL_SPIN_COUNT=0 in the environment (alternate-one-busy-loop-spin0.md).
