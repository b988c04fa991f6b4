# Device call: assemble TVM, the GPU tests, then benchmarks/goals/gpu.py; output packed into $OUT.
# The tensor-core goal table in about 8 minutes:
#   TRIALS=32 BENCH_S=450 EXTRA="--suite tensor-cores --strategies gensor,roller,dgd" bash benchmarks/device/run.sh
exec > >(tee $OUT/log.txt) 2>&1
cd "$(dirname "$0")/../.."
source benchmarks/device/env.sh
timeout ${TEST_S:-90} python3 -m pytest -q -p no:cacheprovider tests/test_cuda_schedule.py tests/test_cuda_mma.py \
    tests/test_model_cuda.py -k "gpu or nvcc or measured" 2>&1 | tail -4
rm -rf /tmp/gpu-out
timeout ${BENCH_S:-500} python3 benchmarks/goals/gpu.py --out /tmp/gpu-out --trials ${TRIALS:-48} --seconds ${SECS:-32} ${EXTRA:-} 2>&1 | grep -v Warning
echo "gpu.py exit $?"
cp /tmp/gpu-out/results.jsonl /tmp/gpu-out/report.md $OUT/ 2>/dev/null
tar -czf $OUT/gpu-out.tgz -C /tmp gpu-out
ls -la $OUT
