# (run_gpu_claims.sh: Fig. 9 and Fig. 11 in one call, the builds apart from the timings.)
# Device call for whole models on the GPU and the tensor-core kernels: assemble TVM (as
# run.sh), run the GPU tests (every test that skips without a GPU), then Fig. 9 on the GPU; everything into $OUT.
#   calls 1 and 2: copy .gpu/a's two parts to /tmp/stage (see pack.sh);  call 3: bash benchmarks/device/run_models.sh
# Knobs (environment): DTYPE (float16), MODELS (resnet50,mobilenetv2 plus bert-small,gpt2 where transformers
# imports), TPT (trials per task of the search, 10), FIG9_S (seconds for Fig. 9, 420), TEST_S (120).
exec > >(tee $OUT/log.txt) 2>&1
cd "$(dirname "$0")/../.."
source benchmarks/device/env.sh
export PYTHONWARNINGS=ignore
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
python3 -c "
import importlib.util as u
print('missing modules:', [m for m in ('rich', 'psutil', 'cloudpickle', 'xgboost', 'matplotlib', 'transformers',
      'ml_dtypes', 'cuda.bindings') if u.find_spec(m.split('.')[0]) is None] or 'none')"
timeout ${TEST_S:-120} python3 -m pytest -q -p no:cacheprovider -x tests/test_model_cuda.py \
    tests/test_cuda_mma.py tests/test_cuda_schedule.py -k "gpu or nvcc or measured" 2>&1 | tail -6
if [ -z "${MODELS:-}" ]; then
    MODELS=resnet50,mobilenetv2
    python3 -c "import transformers" 2>/dev/null && MODELS=bert-small,resnet50,mobilenetv2,gpt2
fi
OUTDIR=/tmp/fig9-gpu-${DTYPE:-float16}
( while sleep 30; do tar -czf $OUT/fig9-gpu.tgz -C /tmp $(basename $OUTDIR) 2>/dev/null; done ) &
SAVER=$!
timeout ${FIG9_S:-420} python3 benchmarks/papers/model_fig9.py --out $OUTDIR --target cuda --dtype ${DTYPE:-float16} \
    --models $MODELS --strategies gensor,roller,evo --trials-per-task ${TPT:-10} --repeat 5 --min-repeat-ms 50
echo "model_fig9.py exit $?"
kill $SAVER 2>/dev/null
tar -czf $OUT/fig9-gpu.tgz -C /tmp $(basename $OUTDIR)
cp $OUTDIR/summary.md $OUT/ 2>/dev/null
ls -la $OUT
