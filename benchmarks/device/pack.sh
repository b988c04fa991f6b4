# Pack TVM 0.27 (with its compiler) for a GPU machine that has Python 3.12, torch and CUDA but no TVM and no
# network, when one transfer (the repository's tracked files, about 30 MB, included) is limited to 64 MiB:
# libtvm_compiler.so (259 MB) xz-compressed (59 MB) and split in 25 MB parts (.gpu/a/ltcpart.00, .01 travel one
# per call; the last part goes to .gpu/b with the tvm package without the compiler and the cp312 wheels of
# apache-tvm-ffi, xgboost-cpu and tornado). Run from the repo root; .gpu/ is git-ignored. Then, there:
#   call 1: `mkdir -p /tmp/stage && cp .gpu/a/ltcpart.00 /tmp/stage/`, carry [".gpu/a/ltcpart.00"];
#   call 2: `cp .gpu/a/ltcpart.01 /tmp/stage/`, carry [".gpu/a/ltcpart.01"];
#   call 3: `bash benchmarks/device/run.sh` (or run_models.sh, run_fig11.sh), carry [".gpu/b"].
set -e
SP=$(python -c "import tvm, os; print(os.path.dirname(os.path.dirname(tvm.__file__)))")
grep -q '^/.gpu/' .git/info/exclude || echo /.gpu/ >> .git/info/exclude
rm -rf .gpu/a .gpu/b; mkdir -p .gpu/a .gpu/b/whl
xz -T2 -9e -c "$SP/tvm/lib/libtvm_compiler.so" > /tmp/ltc.so.xz
(cd /tmp && sha256sum ltc.so.xz) > .gpu/b/ltc.sha256
split -b 25000000 -d /tmp/ltc.so.xz /tmp/ltcpart.
mv /tmp/ltcpart.00 /tmp/ltcpart.01 .gpu/a/; mv /tmp/ltcpart.02 .gpu/b/; rm /tmp/ltc.so.xz
(cd "$SP" && tar --exclude='tvm/lib/libtvm_compiler.so' --exclude='tvm/3rdparty' --exclude='tvm/src' \
    --exclude='tvm/web' --exclude='__pycache__' -cf - tvm apache_tvm-*.dist-info) | xz -T2 -6 > .gpu/b/tvm-py.tar.xz
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 -d .gpu/b/whl \
    apache-tvm-ffi==0.1.14.post0 xgboost-cpu tornado
du -sh .gpu/a .gpu/b
