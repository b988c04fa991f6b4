# Device call for Gensor's Fig. 11 on the GPU (dynamic shapes): assemble TVM (as run.sh), then Bert-small
# at batch x seq, one library per construction (Gensor, Roller: every shape constructed, nothing measured), then
# PyTorch eager and torch.compile(dynamic=True) on the GPU, then the dynamic model's GPU test; all into $OUT
# (log.txt and fig11-gpu.tgz: one results.jsonl and report per construction).
#   calls 1 and 2: copy .gpu/a's two parts to /tmp/stage (see pack.sh);  call 3: bash benchmarks/device/run_fig11.sh
# Knobs (environment): DTYPE (float16), SEQS (16,64,128,384), BATCHES (1,4), FIG11_S (seconds, 420), TEST_S (100; 0: no test),
# RUNS (construction:method[:graphs] ..., default "gensor:tiletune roller:tiletune gensor:torch gensor:torch-compile";
# e.g. RUNS="gensor:tiletune:graphs gensor:torch-compile:graphs": ours with CUDA graphs against torch.compile's
# mode='reduce-overhead', into DIR/gensor-graphs).
# The two constructions run first (a method's rows are written when all its shapes are done), the baselines after,
# the dynamic model's GPU test last.
exec > >(tee $OUT/log.txt) 2>&1
cd "$(dirname "$0")/../.."
source benchmarks/device/env.sh
export PYTHONWARNINGS=ignore
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
M=benchmarks/common/dyn_models.py:bert_small
SHAPES="--shapes batch=${BATCHES:-1,4} --shapes seq=${SEQS:-16,64,128,384}"
COMMON="--target cuda --dtype ${DTYPE:-float16} --repeat 5 --min-repeat-ms 50"
D=/tmp/fig11-gpu
mkdir -p $D
end=$(( $(date +%s) + ${FIG11_S:-420} ))
left() { echo $(( end - $(date +%s) )); }
for run in ${RUNS:-gensor:tiletune roller:tiletune gensor:torch gensor:torch-compile}; do
    IFS=: read c m g <<< "$run"   # construction, method, and "graphs" for --cuda-graph (its own results)
    [ $(left) -gt 5 ] || { echo "$run: no time left"; continue; }
    timeout $(left) python3 -m tiletune.cli model bench $M $SHAPES $COMMON --construct $c --methods $m \
        ${g:+--cuda-graph} --out $D/$c${g:+-graphs}
    echo "$run exit $? at $(left) s left"
done
tar -czf $OUT/fig11-gpu.tgz -C /tmp fig11-gpu  # packed before the test too: the call's limit may cut it
[ "${TEST_S:-100}" -gt 0 ] && timeout ${TEST_S:-100} python3 -m pytest -q -p no:cacheprovider tests/test_model_shapes.py \
    tests/test_model_cuda.py -k "(cuda_library and ${DTYPE:-float16}) or cuda_graph_replays" 2>&1 | tail -4
tar -czf $OUT/fig11-gpu.tgz -C /tmp fig11-gpu
ls -la $OUT
