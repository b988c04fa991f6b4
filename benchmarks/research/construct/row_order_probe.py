"""Probes of the row order (benchmarks/README.md, "The row order"), each configuration measured in one warm pool
per workload, 4 rounds (the first warms), the median of the later rounds, fastest first. Run on an idle machine;
the outputs are in benchmarks/out/construct-refine-row/.

    P=benchmarks/research/construct/row_order_probe.py O=benchmarks/out/construct-refine-row
    python $P hand > $O/hand.txt                     # hand-written row kernels of the suite's depthwise conv
    python $P constructions WORKLOAD... > $O/constructions.txt
    python $P model MODEL KEY-PART... > $O/model.txt # a model's NCHW tasks whose key contains a KEY-PART

``hand``: which tiles under the row keep LLVM's loop vectoriser on it (S3 tiles p3, S2 tiles p2, unroll depths),
with the fastest record's kernel and Gensor's and Roller's top 4. ``constructions``: Gensor's and Roller's top 4,
the row construction (``direct_constructions``) and its unroll sweep. ``model``: the same for tasks of a model
imported in NCHW (fused kernels: the bias and clip epilogues included), whose key contains one of the given
parts (``direct0`` is the row construction of a depthwise task; a 1x1 conv's would be a direct order's)."""
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.bench.suites import load  # noqa: E402
from tiletune.construct import choice_sweep, constructions, direct_constructions  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.target import host_target  # noqa: E402
from tiletune.workloads import parse  # noqa: E402

SUITE = load("construct-refine")
LEVELS, TARGET = parse_levels(SUITE.levels), host_target()
DEPTHWISE = "depthwise_conv2d:N=1,C=256,H=28,W=28,R=3,S=3,stride=1,pad=1,dilation=1"


def tops(wl, space) -> dict:
    return {f"{m}{i}": c for m in ("gensor", "roller") for i, c in enumerate(
        constructions(m, space, workload=wl, target=TARGET, k=4, rng=np.random.default_rng(0)))}


def measure_pool(wl, space, cfgs: dict, rounds: int = 4) -> None:
    """Print every configuration of ``cfgs`` (name -> Config) with its GFLOPS, fastest first."""
    names = list(cfgs)
    times = [[] for _ in names]
    with make_measurer(wl, space, TARGET) as meas:
        meas.warm_up()
        for r in range(rounds):
            for j, res in enumerate(meas.measure([cfgs[n] for n in names])):
                if res.costs and r > 0:
                    times[j].append(statistics.median(res.costs))
    gflops = {n: wl.flops / statistics.median(t) / 1e9 if t else 0.0 for n, t in zip(names, times)}
    print(wl.key)
    for n in sorted(names, key=lambda n: -gflops[n]):
        print(f"{gflops[n]:7.1f}  {n:28s} {json.dumps(space.to_dict(cfgs[n]))}")


def hand() -> None:
    wl = parse(DEPTHWISE)
    space = make_space(wl, LEVELS, TARGET)
    cfgs = {}

    def add(name, c, p, q=(1, 28, 1, 1), r=(1, 3), s=(1, 3), u=64):
        cfgs[name] = space.from_dict(dict(tile_n=[1, 1, 1, 1], tile_c=list(c), tile_p=list(p), tile_q=list(q),
                                          tile_r=list(r), tile_s=list(s), unroll=u))

    add("best112", [16, 16, 1, 1], [7, 1, 4, 1], s=(3, 1))
    for p3 in (1, 2, 4, 7, 14):
        for u in (16, 64, 512):
            add(f"row_p3={p3}_u{u}", [16, 16, 1, 1], [1, 28 // p3, 1, p3], u=u)
    for p2 in (2, 4):
        add(f"row_p2={p2}_u64", [16, 16, 1, 1], [1, 28 // p2, p2, 1])
    add("row_c256_p3=4_u64", [256, 1, 1, 1], [1, 7, 1, 4])
    add("row_c256_p3=4_p0=7_u64", [256, 1, 1, 1], [7, 1, 1, 4])
    add("row_c16_p0=7_p3=4_u64", [16, 16, 1, 1], [7, 1, 1, 4])
    add("row_c2p3=2", [16, 8, 1, 2], [1, 14, 1, 2])
    cfgs.update(tops(wl, space))
    measure_pool(wl, space, cfgs)


def construction_probe(workloads) -> None:
    for wl in workloads:
        space = make_space(wl, LEVELS, TARGET)
        cfgs = tops(wl, space)
        for i, c in enumerate(direct_constructions(space, workload=wl, target=TARGET)):
            cfgs[f"direct{i}"] = c
            cfgs.update({f"direct{i}-sweep{j}": v for j, v in enumerate(choice_sweep(space, c))})
        measure_pool(wl, space, cfgs)


if __name__ == "__main__":
    if sys.argv[1:2] == ["hand"]:
        hand()
    elif sys.argv[1:2] == ["constructions"] and sys.argv[2:]:
        construction_probe([parse(k) for k in sys.argv[2:]])
    elif sys.argv[1:2] == ["model"] and sys.argv[3:]:
        from tiletune.model.kernels.tasks import load_model_tasks
        _, tasks = load_model_tasks(sys.argv[2], TARGET, "NCHW")
        construction_probe([t.workload for t in tasks.tasks if any(p in t.workload.key for p in sys.argv[3:])])
    else:
        sys.exit(__doc__)
