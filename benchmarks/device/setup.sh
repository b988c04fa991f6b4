# Assemble TVM 0.27 (compiler included) on the device machine from the carried parts; tiletune then runs
# from the repo root through PYTHONPATH. Usage: source benchmarks/device/setup.sh STAGE_DIR_WITH_THE_A_PARTS PYTHON
REPO=$PWD; STAGE=${1:-/tmp/stage}; PY=${2:-python3}; SITE=${SITE:-/tmp/site}
t0=$(date +%s)
mkdir -p $SITE
cat $STAGE/ltcpart.* $REPO/.gpu/b/ltcpart.* > /tmp/ltc.so.xz || return 1
(cd /tmp && sha256sum -c $REPO/.gpu/b/ltc.sha256) || return 1
tar -xJf $REPO/.gpu/b/tvm-py.tar.xz -C $SITE || return 1
xz -d -T0 -c /tmp/ltc.so.xz > $SITE/tvm/lib/libtvm_compiler.so || return 1
rm -f /tmp/ltc.so.xz
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE $REPO/.gpu/b/whl/*.whl || return 1
export PYTHONPATH=$SITE:$REPO
echo "setup: $(( $(date +%s) - t0 )) s"
