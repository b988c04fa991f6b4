"""numpy's BLAS as the vendor baseline, timed the old way and the corrected way, alternately.

    python benchmarks/goals/vendor_baseline.py [--sizes 512,1024] [--rounds 5] [--threads N]

- old: numpy's matmul checked and timed with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE set as some machines set
  them for old OpenBLAS builds (the values of this process when it has them, else ``--coretype`` (Haswell) and
  this CPU's L2 size from sysfs), which is what the vendor baseline ran with before it got its own process;
- new: ``tiletune.bench.vendor.vendor``, its own process without both variables.

Both run in a child process (so that neither keeps OpenBLAS threads spinning beside the other), with the same
timing rule, ``--threads`` BLAS threads, one after the other for each size and round. Prints each timing, the
kernel each ran (its label) and the ratio new / old per round. Not a test: the machine is shared and noisy,
so compare the ratios of one run (docs/decisions/vendor-baseline.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from tiletune.bench.vendor import child_env, vendor
from tiletune.measure.base import MeasureSettings
from tiletune.target import host_cores
from tiletune.workloads import parse


def l2_bytes() -> str:
    """This CPU's L2 size in bytes (sysfs), the kind of value machines put in OPENBLAS_L2_SIZE."""
    text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()  # e.g. "1024K"
    units = {"K": 2**10, "M": 2**20}
    return str(int(text[:-1]) * units[text[-1]]) if text[-1] in units else text


def old(wl, settings: MeasureSettings, threads: int, coretype: str) -> tuple[float, str]:
    """GFLOPS and label of numpy's matmul timed with the OpenBLAS overrides in its environment."""
    env = child_env(threads)
    env["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE", coretype)
    env["OPENBLAS_L2_SIZE"] = os.environ.get("OPENBLAS_L2_SIZE", l2_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        job = {"workload": wl.key, "settings": asdict(settings), "threads": threads, "use_torch": False,
               "result": os.path.join(tmp, "r.json")}
        Path(tmp, "job.json").write_text(json.dumps(job))
        subprocess.run([sys.executable, "-m", "tiletune.bench.vendor", os.path.join(tmp, "job.json")], env=env,
                       check=True)
        r = json.loads(Path(job["result"]).read_text())
    assert r["error"] is None, r["message"]
    return wl.flops / statistics.median(r["costs"]) / 1e9, r["label"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="512,1024")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=host_cores())
    p.add_argument("--coretype", default="Haswell", help="OPENBLAS_CORETYPE of 'old' when this process has none")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    settings = MeasureSettings(repeat=a.repeat, min_repeat_ms=100)
    print(f"this process: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')!r} "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE')!r}; old uses them when set, else "
          f"{a.coretype!r} and {l2_bytes()} (sysfs L2)")
    for n in (int(s) for s in a.sizes.split(",")):
        wl = parse(f"gemm:M={n},N={n},K={n}")
        ratios, olds, news = [], [], []
        for i in range(a.rounds):
            go, lo = old(wl, settings, a.threads, a.coretype)
            r = vendor(wl, settings, threads=a.threads)
            assert r.ok, (r.error, r.message)
            gn = r.gflops(wl.flops)
            olds.append(go), news.append(gn), ratios.append(gn / go)
            print(f"GEMM {n} round {i}: old {go:6.1f} GFLOPS [{lo}]  new {gn:6.1f} GFLOPS [{r.label}]  "
                  f"new/old {gn / go:.2f}", flush=True)
        print(f"GEMM {n}: old median {statistics.median(olds):.1f} (min {min(olds):.1f}, max {max(olds):.1f}); "
              f"new median {statistics.median(news):.1f} (min {min(news):.1f}, max {max(news):.1f}); "
              f"new/old per round {[round(x, 2) for x in ratios]}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
