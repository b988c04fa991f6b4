"""How m4/cs_in.json was written (a probe, run from the repository root): Roller's tree with the channels c and
the column axis s whole in R1 and the row axis r whole in R0; then
    python benchmarks/construct_top.py measure cs_in.json --out m4 --rounds 3
"""
import numpy as np
sys.path.insert(0, 'benchmarks')
from tiletune.bench.suites import load
from tiletune.construct.roller import RollerTree
from tiletune.cost_model.etir import Model
from tiletune.schedules import make_space
from tiletune.space import parse_levels
from tiletune.target import host_target
from tiletune.workloads import parse

class M(Model):
    whole = ("c", "s")
    def mode(self, i, l):
        k = self.knobs[i][1]
        if k.kind == "R" and 1 <= l <= k.levels - 1:
            return "full" if k.axis in self.whole else "one"
        return super().mode(i, l)

suite = load('construct-refine'); levels, tgt = parse_levels(suite.levels), host_target()
out = {"suite": "construct-refine", "k": 8, "seed": 0, "tops": {}}
for key in suite.workloads:
    if not key.startswith('conv2d'): continue
    wl = parse(key); sp = make_space(wl, levels, tgt)
    m = M(sp, wl, None, tgt)
    tops = [c for _, c in RollerTree(sp, m).construct()[:2]]
    out["tops"][wl.key] = {"roller": [dict(sp.to_dict(c), unroll=u) for c in tops for u in (0, 16, 64, 512)]}
    print(key, [sp.to_dict(c) for c in tops])
json.dump(out, open('benchmarks/out/construct-refine-direct/constructions/m4/cs_in.json', 'w'))
