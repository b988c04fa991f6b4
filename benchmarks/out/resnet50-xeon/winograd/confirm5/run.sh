#!/usr/bin/env bash
# resnet50 (Winograd, ../resnet50-xgb-winograd.jsonl.gz) with the tasks' top 5 confirmed (the model tune default since
# 2026-11-29, docs/decisions/model-confirm.md) against the same records unconfirmed and ONNX Runtime, every side alive
# in its own process, taking turns (threads_vs_ort.py --alternate). added.jsonl.gz: what the tune command below
# appended to the records: 290 confirmation measurements and 73 new xgb trials (the budget's replay is not exact:
# the products were tuned by a run of their own; matmul2 and matmul3 got 32 more each, two other tasks 9), in 2.8 min.
# rec-more: the records with those trials but not the confirmations (resnet50-2t-again.md: no faster than rec-orig).
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
OUT=benchmarks/out/resnet50-xeon/winograd/confirm5
zcat benchmarks/out/resnet50-xeon/winograd/resnet50-xgb-winograd.jsonl.gz > /tmp/rec-orig.jsonl
cp /tmp/rec-orig.jsonl /tmp/rec-c5.jsonl
python -m tiletune.cli model tune resnet50 -s xgb --trials 1238 -r /tmp/rec-c5.jsonl --confirm 5
grep -v '"strategy": "confirm"' /tmp/rec-c5.jsonl > /tmp/rec-more.jsonl
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r /tmp/rec-orig.jsonl -r /tmp/rec-c5.jsonl --alternate \
    --rounds 15 --calls 20 --threads 2 > $OUT/resnet50-2t.md
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r /tmp/rec-orig.jsonl -r /tmp/rec-c5.jsonl --alternate \
    --rounds 12 --calls 10 --threads 1 > $OUT/resnet50-1t.md
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r /tmp/rec-orig.jsonl -r /tmp/rec-more.jsonl \
    -r /tmp/rec-c5.jsonl --alternate --rounds 15 --calls 20 --threads 2 > $OUT/resnet50-2t-again.md
# rival register tiles (probed, not adopted; docs/decisions/model-confirm.md): the confirmation's candidates with the
# fastest configuration of every other register tile within 1.25x of the best (the code of that probe:
# confirm.candidates(records, workload, top, space), RIVAL_TILES = 1.25, not in the tree); added-rival-tiles.jsonl.gz:
# its second confirmation pass of 9 tasks, appended to /tmp/rec-c5.jsonl as /tmp/rec-rt.jsonl
python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 -r /tmp/rec-orig.jsonl -r /tmp/rec-c5.jsonl \
    -r /tmp/rec-rt.jsonl --alternate --rounds 15 --calls 20 --threads 2 > $OUT/rival-tiles-2t.md
# class by class against ONNX Runtime, the confirmed build, both sides alternating
python benchmarks/research/in_model/convs_vs_ort.py --model resnet50 -r /tmp/rec-c5.jsonl --out $OUT/convs-2t --runs 5 --threads 2 \
    --stat min --rounds 20
