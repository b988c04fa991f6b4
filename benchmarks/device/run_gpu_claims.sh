# Device call for every GPU claim in one run of at most 8 minutes (after TVM is carried: pack.sh, then calls 1 and 2
# copy .gpu/a's two parts to /tmp/stage; this is call 3, carry [".gpu/b"]):
#     bash benchmarks/device/run_gpu_claims.sh
# the GPU tests, Fig. 9 in float16 for bert-small, gpt2, resnet50, mobilenetv2 (Gensor's and Roller's constructions,
# each with and without CUDA graphs, the search for a fixed time per model, TVM's default build with dlight, PyTorch
# eager, torch.compile, and torch.compile with CUDA graphs if time is left; every model's output checked against the
# original in float32), Fig. 11 (Bert-small over batch x seq: Gensor's and Roller's libraries, PyTorch eager,
# torch.compile(dynamic=True)), then trials per second of the search on GEMM 1024^3 fp16 if time is left.
# Fig. 12 stays in run_fig12.sh (its own call: it re-optimizes on the device, minutes by itself).
#
# The builds are apart from the timings (benchmarks/papers/model_fig9.py --stage, model_fig11.py --rounds 0): the
# machine's 16 cores build every library at once while the GPU runs the tests and the search; every timing comes
# after, with the builds done. Libraries cannot be built on a CPU machine and carried instead: a model's weights
# are constants inside its library (float16, built here: mobilenetv2 8 MB, resnet50 53, bert-small 89, gpt2
# 325), and a call carries 64 MiB with the repository's 31 MiB and .gpu/b; the CUDA code in a library built
# without a GPU is source, compiled by NVRTC when it loads (docs/gpu.md).
#
# Time plan (seconds from the start; each step's timeout is cut to its phase's end, so a slow step shortens the
# ones after it, never the run):
#   0-5     GPU, driver, CUDA, torch versions (OUT/env.txt); background: every build (JOBS at once, 10): Fig. 11's
#           two libraries (the longest), torch.compile once per model and once over Fig. 11's shapes (timed and
#           discarded: the compiled graphs stay in inductor's cache for the timings later), Fig. 9's 4 models x
#           (gensor, roller, gensor-graphs, roller-graphs, tvm-default)
#   5-100   the GPU tests, in the background too (TEST_S, 90; correctness only)
#   5-130   the search (evo) on the GPU, TUNE_S (15) per model (its trials per second under the builds' load),
#           then its 4 libraries built with the others
#   ..220   phase 1 ends (P1_END): a build still running is stopped, its library counts as missing
#   220-320 Fig. 9: our 5 libraries and TVM's default build timed, each checked (one process per model)
#   320-350 PyTorch eager, 4 models
#   350-400 Fig. 11: PyTorch eager and our two libraries at the 8 shapes
#   400-440 torch.compile, 4 models (compiled from the cache)
#   440-460 Fig. 11's torch.compile(dynamic=True)
#   460-465 phase 2 ends (P2_END): torch.compile with CUDA graphs, then GEMM 1024^3 trials/s, only if time is left
#   465-478 summaries (END_S, 478)
# Everything goes to $OUT as it comes: log.txt (all output), env.txt, gpu-claims.tgz (fig9/, fig11/, logs/ without
# the libraries; re-packed every 30 s, so a run cut short returns what it had), summary-fig9.md, summary-fig11.md.
#
# Knobs (environment): DTYPE (float16), MODELS (bert-small,gpt2,resnet50,mobilenetv2), JOBS (10), TEST_S (90),
# TUNE_S (15), SEQS (16,64,128,384), BATCHES (1,4), P1_END (220), P2_END (465), END_S (478), REPEAT (5),
# MIN_MS (50).
#
# DRY=1: the whole script on a CPU machine, the GPU stubbed: no nvidia-smi, the tests collected (not run), every
# library of DRY_BUILD (mobilenetv2; "all": every model) really built for cuda:sm_90 (the others' models imported
# and their tasks extracted by `model tasks`), every step that needs the GPU run with its real arguments until it
# is refused in one line ("... and none was found"; any other failure fails the dry run), the timing stage with
# --dry-run (each library present, the float32 references computed), Fig. 11 built and summarized without timing.
# The phase marks do not apply there (that CPU is no measure of the GPU machine's) and each step may take 10 times
# its cap. OUT defaults to /tmp/gpu-claims-dry there; the exit status is the number of failed steps.
set -u
cd "$(dirname "$0")/../.."
DRY=${DRY:-0}
if [ "$DRY" = 1 ]; then OUT=${OUT:-/tmp/gpu-claims-dry}; rm -rf "$OUT"; mkdir -p "$OUT"; fi
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s)
if [ "$DRY" = 1 ]; then
    echo "DRY=1: no GPU; steps that need one must be refused in one line"
    PY=python
else
    source benchmarks/device/env.sh
    PY=python3
fi
export PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1
DT=${DTYPE:-float16}
MODELS=${MODELS:-bert-small,gpt2,resnet50,mobilenetv2}
JOBS=${JOBS:-10}
P1_END=${P1_END:-220}; P2_END=${P2_END:-465}; END_S=${END_S:-478}; TUNE_S=${TUNE_S:-15}
TIMING="--repeat ${REPEAT:-5} --min-repeat-ms ${MIN_MS:-50}"
W=/tmp/gpu-claims          # libraries and scratch (large: never under $OUT)
D=$W/results               # what comes back, packed
LIBS=$W/libs
rm -rf $W; mkdir -p $D/logs $LIBS
FIG9="$PY benchmarks/papers/model_fig9.py --out $D/fig9 --libs $LIBS --target cuda --dtype $DT --models $MODELS \
--strategies gensor,roller,evo --cuda-graph $TIMING"
FIG11ARGS="--target cuda --dtype $DT --seqs ${SEQS:-16,64,128,384} --batches ${BATCHES:-1,4} --repeat ${REPEAT:-5} \
--min-repeat-ms ${MIN_MS:-50}"
FIG11="$PY benchmarks/papers/model_fig11.py --out $D/fig11 --work $W/fig11 $FIG11ARGS"
FAILED=0

# seconds left until the mark $1 (seconds from the start); under DRY no mark (this CPU is no measure of that machine)
left() { if [ "$DRY" = 1 ]; then echo 9999; else echo $(( T0 + $1 - $(date +%s) )); fi; }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
pack() {  # everything but the libraries into $OUT, atomically
    tar -czf $W/pack.$BASHPID.tgz -C $W results 2>/dev/null && mv -f $W/pack.$BASHPID.tgz $OUT/gpu-claims.tgz
}
# step NAME MARK CAP CMD...: CMD with the time left until MARK (at most CAP s), output into the log; under DRY a step
# that needs a GPU passes when it is refused in one line for the want of one
step() {
    local name=$1 mark=$2 cap=$3; shift 3
    local t=$(left $mark); [ "$DRY" = 1 ] && cap=$(( cap * 10 )); [ $t -gt $cap ] && t=$cap
    if [ $t -le 5 ]; then stamp "$name: no time left (phase ends at $mark s)"; return 0; fi
    stamp "$name (limit $t s): $*"
    timeout $t "$@" > $D/logs/$name.log 2>&1
    local rc=$?
    grep -v -e '^\s*$' $D/logs/$name.log | tail -${TAIL:-12}
    if [ $rc -ne 0 ]; then
        if [ "$DRY" = 1 ] && grep -q "none was found" $D/logs/$name.log; then
            stamp "$name: refused for the want of a GPU, as expected (DRY)"
        else
            stamp "$name: exit $rc"; FAILED=$((FAILED + 1))
        fi
    fi
    pack
    return 0
}

# ---- 0: the machine
{
    echo "date: $(date -u +%FT%TZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    [ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    $PY -c "
import platform, os, torch, tvm
print('python', platform.python_version(), '| torch', torch.__version__, '| torch CUDA', torch.version.cuda,
      '| TVM', tvm.__version__, '| cores', os.cpu_count())
print('GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')
import importlib.util as u
print('missing modules:', [m for m in ('rich', 'psutil', 'cloudpickle', 'xgboost', 'matplotlib', 'transformers',
      'ml_dtypes', 'cuda.bindings') if u.find_spec(m.split('.')[0]) is None] or 'none')"
} 2>&1 | tee $OUT/env.txt
cp $OUT/env.txt $D/env.txt
( while sleep 30; do pack; done ) &
SAVER=$!

# ---- 1: every build in the background, JOBS at once; each build's wall time into $LIBS/builds.jsonl
run_one() {  # LINE = "LIBRARY<TAB>COMMAND"
    local lib=${1%%$'\t'*} cmd=${1#*$'\t'} name t0 rc
    name=$(basename "$lib" .so)
    t0=$(date +%s.%N)
    if [ $(( BUILD_END - $(date +%s) )) -le 5 ]; then echo "$name: no time left to build"; return 0; fi
    timeout $(( BUILD_END - $(date +%s) )) bash -c "$cmd" > "$D/logs/build-$name.log" 2>&1
    rc=$?
    if [ "$DRY" = 1 ] && [ $rc -ne 0 ] && grep -q "none was found" "$D/logs/build-$name.log"; then rc=0; fi
    printf '{"lib": "%s", "wall_s": %s, "rc": %d}\n' "$lib" "$(awk "BEGIN {print $(date +%s.%N) - $t0}")" $rc \
        >> $LIBS/builds.jsonl
    echo "[$(( $(date +%s) - T0 )) s] built $name: exit $rc"
}
export -f run_one
export D LIBS DRY T0
export BUILD_END=$(( T0 + P1_END + ( DRY == 1 ? 7200 : 0 ) ))
IFS=, read -ra ALL <<< "$MODELS"
BUILT=$MODELS; CHECKED=
if [ "$DRY" = 1 ] && [ "${DRY_BUILD:-mobilenetv2}" != all ]; then  # DRY: the models not built are CHECKED
    BUILT=${DRY_BUILD:-mobilenetv2}
    CHECKED=$(for m in "${ALL[@]}"; do [[ ",$BUILT," == *",$m,"* ]] || printf '%s ' $m; done)
fi
{
    for c in gensor roller; do printf '%s\t%s\n' "$W/fig11/$c.so" "$FIG11 --methods $c --rounds 0"; done
    for m in "${ALL[@]}"; do  # torch.compile once: its graphs in the cache for the timing
        printf '%s\t%s\n' "torch-compile-$m" "$PY -m tiletune.cli model bench $m --target cuda --dtype $DT \
--methods torch-compile --out $W/warm/$m --repeat 1 --min-repeat-ms 1"
    done
    [ "$DRY" = 1 ] || printf '%s\t%s\n' "torch-compile-fig11" "$PY benchmarks/papers/model_fig11.py --out $W/warm/fig11 \
--work $W/warm/fig11-libs $FIG11ARGS --methods torch-compile --rounds 0"
    $FIG9 --models $BUILT --stage build-cmds
    for m in $CHECKED; do  # DRY: the models not built are imported and their tasks extracted
        printf '%s\t%s\n' "tasks-$m" "$PY -m tiletune.cli model tasks $m --target cuda:sm_90 --dtype $DT"
    done
} > $D/builds.txt
stamp "background: $(wc -l < $D/builds.txt) builds, $JOBS at once"
( tr '\n' '\0' < $D/builds.txt | xargs -0 -P $JOBS -I{} bash -c 'run_one "$1"' _ {} ) &
BUILDER=$!

# ---- 1: the GPU tests in the background too (correctness only: the builds may slow them), the search in front
TESTS="tests/test_model_cuda.py tests/test_cuda_mma.py tests/test_cuda_schedule.py tests/test_model_shapes.py"
SEL="gpu or nvcc or measured or cuda_graph_replays or (cuda_library and $DT)"
( TAIL=8 step tests 100 ${TEST_S:-90} $PY -m pytest -q -p no:cacheprovider $([ "$DRY" = 1 ] && echo --collect-only) \
    $TESTS -k "$SEL"; exit $FAILED ) &
TESTER=$!
TAIL=20 step tune 130 $(( ${#ALL[@]} * (TUNE_S + 20) )) $FIG9 --stage tune --tune-seconds $TUNE_S
$FIG9 --models $BUILT --stage build-cmds | grep -- '-evo.so' > $D/builds-evo.txt
stamp "the search's libraries: $(wc -l < $D/builds-evo.txt)"
tr '\n' '\0' < $D/builds-evo.txt | xargs -0 -r -P $JOBS -I{} bash -c 'run_one "$1"' _ {}
wait $TESTER || FAILED=$((FAILED + 1))
stamp "waiting for the background builds (until $P1_END s)"
wait $BUILDER
stamp "phase 1 done: $(grep -c '"rc": 0' $LIBS/builds.jsonl) of $(wc -l < $LIBS/builds.jsonl) builds succeeded"
ls -la $LIBS | grep '\.so$' | awk '{print "  " $5 "  " $9}'
pack

# ---- 2: the timings, one process at a time, on a machine with nothing else to do
TAIL=40 step fig9-ours 320 120 $FIG9 --stage time $([ "$DRY" = 1 ] && echo --dry-run)
for m in "${ALL[@]}"; do
    step fig9-torch-$m 350 30 $PY -m tiletune.cli model bench $m --target cuda --dtype $DT --methods torch \
        --out $D/fig9/$m-baselines $TIMING
done
OURS11=$(for c in gensor roller; do [ -f $W/fig11/$c.so ] && printf '%s,' $c; done)  # a library not built: not timed
stamp "Fig. 11 libraries: ${OURS11:-none}"
if [ "$DRY" = 1 ]; then  # the libraries are there; timing them needs the GPU
    step fig11-ours 400 120 $FIG11 --methods ${OURS11}none --rounds 0
else
    step fig11-ours 400 120 $FIG11 --methods ${OURS11}torch --rounds 1
fi
for m in "${ALL[@]}"; do
    step fig9-compile-$m 440 60 $PY -m tiletune.cli model bench $m --target cuda --dtype $DT --methods torch-compile \
        --out $D/fig9/$m-baselines $TIMING
done
[ "$DRY" = 1 ] || step fig11-compile 460 90 $FIG11 --methods ${OURS11}torch,torch-compile --rounds 1
for m in "${ALL[@]}"; do
    step fig9-compile-graphs-$m $P2_END 60 $PY -m tiletune.cli model bench $m --target cuda --dtype $DT \
        --methods torch-compile --cuda-graph --out $D/fig9/$m-baselines-graphs $TIMING
done
if [ "$(left $P2_END)" -ge 30 ]; then
    step gemm-trials $P2_END 25 $PY -m tiletune.cli tune gemm:M=1024,N=1024,K=1024,dtype=float16 --target cuda \
        --seconds 20 -o $D/gemm1024-fp16.jsonl
    [ -f $D/gemm1024-fp16.jsonl ] && echo "GEMM 1024^3 fp16: $(wc -l < $D/gemm1024-fp16.jsonl) trials in 20 s"
fi

# ---- 3: summaries
TAIL=40 step fig9-summary $END_S 20 $FIG9 --stage summary
cp $D/fig9/summary.md $OUT/summary-fig9.md 2>/dev/null
[ "$DRY" = 1 ] || cp $D/fig11/summary-wall.md $OUT/summary-fig11.md 2>/dev/null
kill $SAVER 2>/dev/null
pack
stamp "done: $FAILED failed step(s)"
ls -la $OUT
exit $FAILED
