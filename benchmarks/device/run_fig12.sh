# Device call for Gensor's Fig. 12 on the GPU: assemble TVM (as run.sh), then MobileNetV2 whose width
# changes 1.0 -> 0.75 -> 0.5 -> 1.4, re-optimized on the device after each change (benchmarks/papers/model_fig12.py
# --target cuda): PyTorch eager, Gensor and Roller over every phase first, then the search (xgb) if time is left;
# into $OUT (log.txt and fig12-gpu.tgz: results.jsonl, optimize.jsonl, summary-wall.md, fig12-wall.png).
#   calls 1 and 2: copy .gpu/a's two parts to /tmp/stage (see pack.sh);  call 3: bash benchmarks/device/run_fig12.sh
# Knobs (environment): DTYPE (float16), FRAMES per phase (3000), TPT the search's trials per task (4),
# FIG12_S (seconds for everything, 500), WIDTHS (1.0,0.75,0.5,1.4).
exec > >(tee $OUT/log.txt) 2>&1
cd "$(dirname "$0")/../.."
source benchmarks/device/env.sh
export PYTHONWARNINGS=ignore
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
D=/tmp/fig12-gpu
mkdir -p $D
end=$(( $(date +%s) + ${FIG12_S:-500} ))
left() { echo $(( end - $(date +%s) )); }
for methods in torch,gensor,roller search; do
    [ $(left) -gt 20 ] || { echo "$methods: no time left"; continue; }
    timeout $(left) python3 benchmarks/papers/model_fig12.py --out $D --work /tmp/fig12-work --target cuda \
        --dtype ${DTYPE:-float16} --frames ${FRAMES:-3000} --trials-per-task ${TPT:-4} \
        --widths ${WIDTHS:-1.0,0.75,0.5,1.4} --methods $methods
    echo "$methods exit $? at $(left) s left"
    tar -czf $OUT/fig12-gpu.tgz -C /tmp fig12-gpu  # after each: the call's limit may cut the next
done
ls -la $OUT
