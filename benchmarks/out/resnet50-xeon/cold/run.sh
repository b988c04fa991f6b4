# resnet50 on the 2-core Xeon VM: each kernel's time in the model against the same kernel alone, warm and cold,
# and ONNX Runtime's convolution alone, warm and trashed (summary.md). One thread, run from the repository root.
set -e
D=benchmarks/out/resnet50-xeon/cold
R=benchmarks/out/resnet50-xeon/confirm/resnet50-new0c.jsonl.gz
export TVM_NUM_THREADS=1
python benchmarks/research/in_model/inmodel_calls.py --model resnet50 -r $R --runs 40 > $D/inmodel.md
for t in fused_conv2d14_add8_add11_relu8 fused_conv2d18_add13_relu9 fused_conv2d16_add10_relu7; do
  for mb in 16 256; do
    python benchmarks/research/in_model/kernel_cache_states.py --model resnet50 --task $t -r $R --evict-mb $mb
  done
done > $D/states.txt
{ python benchmarks/research/in_model/ort_conv_cold.py --c 256 --k 1024 --hw 14 --residual
  python benchmarks/research/in_model/ort_conv_cold.py --c 1024 --k 512 --hw 14
  python benchmarks/research/in_model/ort_conv_cold.py --c 256 --k 256 --hw 14 --kernel 3; } > $D/ort.txt 2>/dev/null
# how much data this VM's last-level cache keeps: numpy's read rate (sum) over buffers of 1-256 MiB
python -c "
import numpy as np, time
for mb in [1, 2, 4, 8, 16, 32, 64, 128, 256]:
    a = np.ones(mb * 2**20 // 8); a.sum(); best = 1e9
    for _ in range(max(3, 256 // mb)):
        t = time.perf_counter(); a.sum(); best = min(best, time.perf_counter() - t)
    print(f'{mb:4d} MiB  {mb / 1024 / best:6.1f} GiB/s')" > $D/cache.txt
# which operand's coldness costs: each argument alone flushed (0 the activation, 1 the packed weight, the output last)
for t in fused_conv2d18_add13_relu9:"0 1 3" fused_conv2d14_add8_add11_relu8:"0 1 3 4"; do
  python benchmarks/research/in_model/kernel_cache_states.py --model resnet50 --task ${t%%:*} -r $R --evict-mb 256 \
    --flush-args ${t#*:}
done > $D/operands.txt
