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
python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r gpt2-half.jsonl --threads 2 \
    --rounds 12 --calls 10 --alternate --baselines torch,torch-compile > "$here/alternate-gpt2.md"
python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r NHWC+spin0=gpt2-ffn2.jsonl \
    --threads 2 --rounds 12 --calls 10 --alternate > "$here/alternate-gpt2-spin.md"
# kernels by class against ONNX Runtime's profiler, both alive and alternating, minima (classes-*/convs-vs-ort.md)
zcat "$here/../cnn/mobilenetv2-xgb.jsonl.gz" > mobilenetv2.jsonl
python "$repo/benchmarks/research/in_model/convs_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl --out "$work/classes-gpt2" \
    --runs 20 --threads 2 --stat min --rounds 4
python "$repo/benchmarks/research/in_model/convs_vs_ort.py" --model mobilenetv2 -r mobilenetv2.jsonl \
    --out "$work/classes-mobilenetv2" --runs 40 --threads 2 --stat min --rounds 4
for m in gpt2 mobilenetv2; do
    mkdir -p "$here/classes-$m" && cp "$work/classes-$m/"{convs-vs-ort.md,ort.json,ours.json} "$here/classes-$m/"
done
# every inference's time (raw*.json.gz): gpt2 against ONNX Runtime over 30 turns; glibc's allocations on huge pages
# (+thp) for ours and for ONNX Runtime; then one library loaded twice in one process, on 4 KiB and 2 MiB pages
python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl --threads 2 --rounds 30 \
    --calls 10 --alternate --raw raw30.json > "$here/alternate-gpt2-30.md"
python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r NHWC+thp=gpt2-ffn2.jsonl \
    --threads 2 --rounds 16 --calls 10 --alternate --raw rawthp.json > "$here/alternate-gpt2-thp.md"
python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model gpt2 -r gpt2-ffn2.jsonl -r NHWC+thp=gpt2-ffn2.jsonl \
    --baselines ort+thp --threads 2 --rounds 16 --calls 10 --alternate --raw rawthp2.json \
    > "$here/alternate-gpt2-thp-ort.md"
for f in raw30 rawthp rawthp2; do gzip -9c $f.json > "$here/$f.json.gz"; done
(cd "$repo" && python -m tiletune.cli model build gpt2 -r "$work/gpt2-ffn2.jsonl" -o "$work/gpt2.so")
{ python "$repo/benchmarks/research/in_model/huge_pages.py" gpt2.so --model gpt2 --rounds 16 --calls 10
  echo; echo "(again with --huge-first)"; echo
  python "$repo/benchmarks/research/in_model/huge_pages.py" gpt2.so --model gpt2 --rounds 16 --calls 10 --huge-first | tail -6
  echo; echo "(three times more, with the median of each turn's first inference and of the others; the third with" \
      "--huge-first)"
  for flag in "" "" --huge-first; do
      echo; python "$repo/benchmarks/research/in_model/huge_pages.py" gpt2.so --model gpt2 --rounds 16 --calls 10 $flag | tail -6
  done
} > "$here/huge-pages.md"
# alternate-gpt2-hugepages-runtime.md (rawhp.json.gz): huge_pages() of benchmarks/research/in_model/huge_pages.py wrapped around
# the tvm.compile call of tiletune.model.build.compile_module (ours with its constants on 2 MiB pages, and a side with
# TILETUNE_HUGE_PAGES=0 that left them as they were); not kept, so not reproducible from this tree without that patch
# fig9/: the four Fig. 9 builds of model_fig9.py's latest runs from no records (gpt2: ffn2-start/, bert-small: half/,
# mobilenetv2 and resnet50: cnn/; xgb at 50 trials per task), each against ONNX Runtime, PyTorch eager and
# torch.compile, every side alive in its own process taking turns (12 turns of 10 single inferences, two threads)
zcat "$here/../half/bert-small-xgb.jsonl.gz" > bert.jsonl
zcat "$here/../cnn/resnet50-xgb.jsonl.gz" > resnet50.jsonl
mkdir -p "$here/fig9"
for m in mobilenetv2:mobilenetv2.jsonl resnet50:resnet50.jsonl bert-small:bert.jsonl gpt2:gpt2-ffn2.jsonl; do
    n=${m%%:*}
    python "$repo/benchmarks/research/in_model/threads_vs_ort.py" --model "$n" -r "${m#*:}" --threads 2 --rounds 12 --calls 10 \
        --alternate --baselines torch,torch-compile --raw "raw-$n.json" > "$here/fig9/$n.md"
    gzip -9c "raw-$n.json" > "$here/fig9/raw-$n.json.gz"
done
