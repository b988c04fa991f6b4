"""tiletune source: the code of one configuration (first construction, --config, the best of -r RECORDS), as CUDA C
that nvcc compiles for a CUDA target, as TVMScript or assembly for a CPU; bad input is a one-line error."""
import json
import shutil
import subprocess

import pytest

from tiletune.cli import main
from tiletune.records import Record, RecordWriter
from tiletune.schedules import cuda_mma, make_space
from tiletune.workloads import parse

CPU = '{"kind": "llvm", "num-cores": 1}'
GEMM = "gemm:M=32,N=48,K=16"


def test_cpu_tvmscript_and_asm(capsys):
    assert main(["source", GEMM, "-t", CPU]) == 0
    script = capsys.readouterr().out
    assert "@I.ir_module" in script and "T.parallel" in script and "C_local" in script
    assert main(["source", GEMM, "-t", CPU, "--asm"]) == 0
    asm = capsys.readouterr().out
    assert ".text" in asm and "main" in asm


def test_config_and_records_choose_the_configuration(tmp_path, capsys):
    wl = parse(GEMM)
    space = make_space(wl, target=json.loads(CPU))
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in space.to_dict(space.get(7)).items()}
    d["tile_n"] = [1, 1, 1, 48]
    assert main(["source", GEMM, "-t", CPU, "--config", json.dumps(d)]) == 0
    given = capsys.readouterr().out
    recs = tmp_path / "r.jsonl"
    with RecordWriter(recs) as w:  # the best record wins (the other is slower)
        w.write(Record(workload=wl.key, target=CPU, config=d, median_s=1e-6, gflops=50.0))
        w.write(Record(workload=wl.key, target=CPU, config={**d, "tile_n": [48, 1, 1, 1]}, median_s=1e-3,
                       gflops=0.05))
    out = tmp_path / "k.py"
    assert main(["source", GEMM, "-r", str(recs), "-o", str(out)]) == 0
    assert out.read_text().strip() == given.strip()
    assert main(["source", GEMM, "-t", CPU]) == 0  # the first construction differs from the given config
    assert capsys.readouterr().out != given


@pytest.mark.parametrize("args,msg", [
    (["gemm:M=32,N=48"], "missing parameter K"),
    ([GEMM, "-t", CPU, "--config", "{bad"], "--config is not JSON"),
    ([GEMM, "-t", CPU, "--config", "[1]"], "must be a JSON object"),
    ([GEMM, "-t", CPU, "--config", '{"tile_m": [1, 1, 1, 32]}'], "does not fit the space"),
    ([GEMM, "-t", "cuda:sm_90", "--asm"], "--asm is for CPU targets"),
    (["gemm:M=32,N=48,K=16,dtype=float16", "-t", "cuda:sm_75"], "sm_80 or later"),
    ([GEMM, "-r", "/nonexistent/r.jsonl"], "does not exist"),
])
def test_one_line_errors(args, msg, capsys):
    assert main(["source", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.startswith("tiletune: error:")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_cuda_source_compiles_with_nvcc(tmp_path):
    spec = "gemm:M=40,N=72,K=32,dtype=float16"
    out = tmp_path / "k.cu"
    assert main(["source", spec, "-t", "cuda:sm_90", "-o", str(out)]) == 0
    src = out.read_text()
    assert "mma.sync.aligned.m16n8k16" in src and "extern \"C\" __global__" in src
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    wl = parse(spec)
    space = make_space(wl, target={"kind": "cuda", "arch": "sm_90"})
    d = space.to_dict(cuda_mma.default_config(wl, space, {"kind": "cuda", "arch": "sm_90"}))
    assert main(["source", spec, "-t", "cuda:sm_90", "--config", json.dumps({**d, "chunk_k": 16}), "-o",
                 str(tmp_path / "k2.cu")]) == 0
    assert (tmp_path / "k2.cu").read_text() != src
