# Sourced by the device calls (run.sh, run_models.sh, run_fig11.sh, run_fig12.sh) from the repository root: TVM assembled once
# per machine (setup.sh, from the parts the first call copied to /tmp/stage), then the paths and CUDA libraries.
if [ ! -f /tmp/site/tvm/lib/libtvm_compiler.so ]; then source benchmarks/device/setup.sh /tmp/stage python3 || { echo "setup failed"; exit 1; }; fi
export PYTHONPATH=/tmp/site:$PWD
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64; do [ -d $d ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}; done
export PYTHONUNBUFFERED=1
