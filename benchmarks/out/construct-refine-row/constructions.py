"""The constructions of window-only workloads measured in one warm pool per workload, 4 rounds: Gensor's and
Roller's top 4, the row construction (``direct_constructions``) and its unroll sweep. Usage: python
constructions.py WORKLOAD... > constructions.txt (run on an idle machine)."""
import json, statistics, sys
import numpy as np
from tiletune.bench.suites import load
from tiletune.construct import constructions, direct_constructions, choice_sweep
from tiletune.measure.factory import make_measurer
from tiletune.schedules import make_space
from tiletune.space import parse_levels
from tiletune.target import host_target
from tiletune.workloads import parse
suite = load("construct-refine")
levels, tgt = parse_levels(suite.levels), host_target()
for key in sys.argv[1:]:
    wl = parse(key)
    space = make_space(wl, levels, tgt)
    cfgs = {}
    for m in ("gensor","roller"):
        for i,c in enumerate(constructions(m, space, workload=wl, target=tgt, k=4, rng=np.random.default_rng(0))):
            cfgs[f"{m}{i}"] = c
    for i,c in enumerate(direct_constructions(space, workload=wl, target=tgt)):
        cfgs[f"direct{i}"] = c
        for j,c2 in enumerate(choice_sweep(space, c)):
            cfgs[f"direct{i}-sweep{j}"] = c2
    names = list(cfgs); configs = [cfgs[n] for n in names]
    times = [[] for _ in configs]
    with make_measurer(wl, space, tgt) as meas:
        meas.warm_up()
        for r in range(4):
            for j, res in enumerate(meas.measure(configs)):
                if res.costs and r > 0:
                    times[j].append(statistics.median(res.costs))
    print(wl.key)
    for n, c, t in sorted(zip(names, configs, times), key=lambda x: -(statistics.median(x[2]) and wl.flops/statistics.median(x[2])/1e9 if x[2] else 0)):
        g = wl.flops/statistics.median(t)/1e9 if t else 0
        print(f"{g:7.1f}  {n:18s} {json.dumps(space.to_dict(c))}")
