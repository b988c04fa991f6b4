"""How benchmarks/out/construct-refine-direct/constructions/m4/cs_in.json was written (a probe of the second
direct loop order, benchmarks/README.md, "The direct loop order"): Roller's tree with the channels c and the
column axis s whole in R1 and the row axis r whole in R0, its top 2 per NCHW conv of the construct-refine suite
at four unroll depths. Since then ``Model.direct_orders`` builds that order itself. Then, from the repository root:

    python benchmarks/research/construct/direct_order_m4.py
    python benchmarks/research/construct/construct_top.py measure benchmarks/out/construct-refine-direct/constructions/m4/cs_in.json \
        --out benchmarks/out/construct-refine-direct/constructions/m4 --rounds 3
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tiletune.bench.suites import load  # noqa: E402
from tiletune.construct.roller import RollerTree  # noqa: E402
from tiletune.analytic.etir import Model  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.target import host_target  # noqa: E402
from tiletune.workloads import parse  # noqa: E402


class M(Model):
    whole = ("c", "s")

    def mode(self, i, l):
        k = self.knobs[i][1]
        if k.kind == "R" and 1 <= l <= k.levels - 1:
            return "full" if k.axis in self.whole else "one"
        return super().mode(i, l)


def main() -> None:
    suite = load("construct-refine")
    levels, tgt = parse_levels(suite.levels), host_target()
    out = {"suite": "construct-refine", "k": 8, "seed": 0, "tops": {}}
    for key in suite.workloads:
        if not key.startswith("conv2d"):
            continue
        wl = parse(key)
        sp = make_space(wl, levels, tgt)
        tops = [c for _, c in RollerTree(sp, M(sp, wl, None, tgt)).construct()[:2]]
        out["tops"][wl.key] = {"roller": [dict(sp.to_dict(c), unroll=u) for c in tops for u in (0, 16, 64, 512)]}
        print(key, [sp.to_dict(c) for c in tops])
    dest = ROOT / "benchmarks/out/construct-refine-direct/constructions/m4/cs_in.json"
    dest.write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main()
