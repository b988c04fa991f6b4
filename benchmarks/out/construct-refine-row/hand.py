"""Hand-written row-order kernels of the depthwise conv (256 channels, 28x28, 3x3), against the model's own
constructions, in one warm pool, 4 rounds (the fastest record's kernel included): which tiles under the row
keep LLVM's loop vectoriser on it. Output: hand.txt. Run on an idle machine."""
import json, statistics, sys
import numpy as np
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from tiletune.bench.suites import load
from tiletune.construct import constructions
from tiletune.measure.factory import make_measurer
from tiletune.schedules import make_space
from tiletune.space import parse_levels
from tiletune.target import host_target
from tiletune.workloads import parse
suite = load("construct-refine")
levels, tgt = parse_levels(suite.levels), host_target()
wl = parse("depthwise_conv2d:N=1,C=256,H=28,W=28,R=3,S=3,stride=1,pad=1,dilation=1")
space = make_space(wl, levels, tgt)
cfgs = {}
def add(name, c, p, q, r, s, u):
    cfgs[name] = dict(tile_n=[1,1,1,1], tile_c=c, tile_p=p, tile_q=q, tile_r=r, tile_s=s, unroll=u)
add("best112", [16,16,1,1],[7,1,4,1],[1,28,1,1],[1,3],[3,1],64)
for p3 in (1,2,4,7,14):
    for u in (16,64,512):
        add(f"row_p3={p3}_u{u}", [16,16,1,1], [1,28//p3,1,p3], [1,28,1,1], [1,3], [1,3], u)
for p2 in (2,4):
    add(f"row_p2={p2}_u64", [16,16,1,1],[1,28//p2,p2,1],[1,28,1,1],[1,3],[1,3],64)
add("row_c256_p3=4_u64", [256,1,1,1],[1,7,1,4],[1,28,1,1],[1,3],[1,3],64)
add("row_c256_p3=4_p0=7_u64", [256,1,1,1],[7,1,1,4],[1,28,1,1],[1,3],[1,3],64)
add("row_c16_p0=7_p3=4_u64", [16,16,1,1],[7,1,1,4],[1,28,1,1],[1,3],[1,3],64)
add("row_c2p3=2", [16,8,1,2],[1,14,1,2],[1,28,1,1],[1,3],[1,3],64)
for k in (4,):
    for m in ("gensor","roller"):
        for i,c in enumerate(constructions(m, space, workload=wl, target=tgt, k=4, rng=np.random.default_rng(0))):
            cfgs[f"{m}{i}"] = space.to_dict(c)
names = list(cfgs)
configs = [space.from_dict(cfgs[n]) for n in names]
times = [[] for _ in configs]
with make_measurer(wl, space, tgt) as meas:
    meas.warm_up()
    for r in range(4):
        for j, res in enumerate(meas.measure(configs)):
            if res.costs and r > 0:
                times[j].append(statistics.median(res.costs))
for n, c, t in sorted(zip(names, configs, times), key=lambda x: -(wl.flops/statistics.median(x[2])/1e9 if x[2] else 0)):
    g = wl.flops/statistics.median(t)/1e9 if t else 0
    print(f"{g:7.1f}  {n:28s} {json.dumps(cfgs[n])}")
