# Device call for the Hopper template (schedules/cuda_wgmma.py: wgmma + TMA, cuda:sm_90a) on an H100 or H200, in
# at most 8 minutes: assemble TVM (as run.sh: calls 1 and 2 copy .gpu/a's two parts to /tmp/stage, see pack.sh;
# this is call 3, carry [".gpu/b"]), then
#   1. numerics: every kernel of tests/test_cuda_wgmma.py against numpy (-k gpu), and its nvcc/SASS checks;
#   2. the table: benchmarks/goals/gpu.py --suite hopper with --arch sm_90a (the wgmma template), then the same
#      workloads with --arch sm_90 (the mma.sync template), cuBLAS (fp32 accumulation, CUDA graphs) and dlight
#      in the same run, into one results.jsonl and report.md.
# Knobs (environment): TRIALS per (workload, strategy, template) (12), SECS per run (8), STRATEGIES (gensor),
# HOPPER_S for everything after the setup (400; the setup takes about a minute), TEST_S for the numerics (150),
# DRY=1: only print the commands.
# Output in $OUT: log.txt, results.jsonl, report.md, hopper-out.tgz (the records).
#   bash benchmarks/device/run_hopper.sh
set -o pipefail
OUT=${OUT:-/tmp/hopper-out-files}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
run() { if [ -n "${DRY:-}" ]; then echo "+ $*"; else "$@"; fi; }
[ -n "${DRY:-}" ] || exec > >(tee "$OUT/log.txt") 2>&1
[ -n "${DRY:-}" ] || source benchmarks/device/env.sh
[ -n "${DRY:-}" ] || nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
end=$(( $(date +%s) + ${HOPPER_S:-400} ))
left() { echo $(( end - $(date +%s) )); }
D=/tmp/hopper-out
rm -rf $D
run timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider tests/test_cuda_wgmma.py -k "gpu or nvcc"
echo "numerics exit $? at $(left) s left"
for arch in sm_90a sm_90; do
    [ -n "${DRY:-}" ] || [ $(left) -gt 30 ] || { echo "$arch: no time left"; continue; }
    run timeout $(left) python3 benchmarks/goals/gpu.py --out $D --suite hopper --arch $arch \
        --strategies ${STRATEGIES:-gensor} --trials ${TRIALS:-12} --seconds ${SECS:-8}
    echo "gpu.py --arch $arch exit $? at $(left) s left"
    [ -n "${DRY:-}" ] || { cp $D/results.jsonl $D/report.md "$OUT/" 2>/dev/null; tar -czf "$OUT/hopper-out.tgz" -C /tmp hopper-out; }
done
ls -la "$OUT"
