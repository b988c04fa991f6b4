"""The rule for shapes a dynamic model was not tuned at (tiletune.model.dynamic.shape_rule) and transfer across shapes
(tiletune.model.dynamic.shape_transfer): nearest tuned shape and its intervals, kernel identity across shapes, a tuned
configuration applied to a symbolic kernel, configurations adapted to other extents, seeds measured first."""
import re
import warnings
from pathlib import Path

import pytest

from tiletune.model.frontend.source import Dim
from tiletune.space import Space
from tiletune.workloads.base import Axis


def test_nearest_and_its_intervals_cover_the_bounds_without_overlap():
    from tiletune.model.dynamic.shape_rule import nearest, ranges

    dims = {"seq": Dim("seq", 16, 256), "batch": Dim("batch", 1, 4)}
    tuned = [{"batch": b, "seq": s} for b in (1, 4) for s in (32, 64, 128)]
    iv = ranges(dims, tuned)
    assert iv["seq"] == {32: (16, 47), 64: (48, 95), 128: (96, 256)}  # 48 is as near to 32 as to 64: the larger
    assert iv["batch"] == {1: (1, 2), 4: (3, 4)}
    for s in range(16, 257):
        for b in range(1, 5):
            near = nearest(dims, tuned, {"seq": s, "batch": b})
            lo, hi = iv["seq"][near["seq"]]
            assert lo <= s <= hi and iv["batch"][near["batch"]][0] <= b <= iv["batch"][near["batch"]][1]
    assert ranges({"n": Dim("n", 1, None)}, [{"n": 8}])["n"] == {8: (1, None)}


def test_adapt_keeps_inner_tiles_that_divide_and_the_constraint():
    from tiletune.model.dynamic.shape_transfer import adapt

    space = Space.from_axes([Axis("m", 96, "S"), Axis("n", 64, "S"), Axis("k", 256, "R")], levels=(4, 2),
                             choices={"unroll": (0, 16), "pack": (0, 1)})
    c = adapt(space, {"tile_m": [1, 2, 8, 8], "tile_n": [1, 2, 1, 32], "tile_k": [64, 4], "unroll": 16, "pack": 1})
    assert space.to_dict(c) == {"tile_m": [1, 2, 6, 8], "tile_n": [1, 2, 1, 32], "tile_k": [64, 4], "unroll": 16,
                                "pack": 1}  # m = 96: 8 divides it, then 8 does not divide 12: 6, then 2 of 2
    assert space.to_dict(adapt(space, {"tile_m": [1, 1, 1, 128], "tile_n": [64, 1, 1, 1], "tile_k": [1, 256],
                                       "unroll": 64, "pack": 0}))["tile_m"] == [1, 1, 1, 96]
    assert space.to_dict(adapt(space, {"tile_m": [1, 1, 1, 128], "tile_n": [64, 1, 1, 1], "tile_k": [1, 256],
                                       "unroll": 64, "pack": 0}))["unroll"] == 0  # not a value of this space
    wrong_levels = {"tile_m": [1, 96], "tile_n": [1, 1, 1, 64], "tile_k": [1, 256], "unroll": 0, "pack": 0}
    assert adapt(space, wrong_levels) is None
    space.constraint = lambda sp, cfg: sp.to_dict(cfg)["tile_m"][-1] <= 4
    assert adapt(space, {"tile_m": [1, 2, 8, 8], "tile_n": [1, 2, 1, 32], "tile_k": [64, 4], "unroll": 16,
                         "pack": 1}) is None


def test_context_seeds_are_measured_first(space):
    from tiletune.strategies import create
    from tiletune.strategies.base import TuneContext

    seeds = ({"tile_m": [2, 8], "tile_n": [4, 4], "tile_k": [4, 2], "unroll": 64},
             {"tile_m": [1, 16], "tile_n": [1, 16], "tile_k": [8, 1], "unroll": 0},
             {"tile_m": [3, 5], "tile_n": [4, 4], "tile_k": [4, 2], "unroll": 0})  # not a configuration: skipped
    for name, options in (("xgb", {"start": "random"}), ("evo", {"start": "random"}), ("dgd", {})):
        with warnings.catch_warnings():  # dgd's default constructive start cannot apply here: seeds only
            warnings.simplefilter("ignore")
            s = create(name, space, seed=0, context=TuneContext(seeds=seeds), options=options)
        first = [space.to_dict(c) for c in s.ask(2)]
        s.close()
        assert first == list(seeds[:2]), name


@pytest.fixture(scope="module")
def attn(home):
    """The test model of test_model_shapes.py: its symbolic module, fused, and its static kernels at seq=16."""
    from tiletune.model.dynamic.shapes import shape_tasks
    from tiletune.model.frontend.source import load
    from tiletune.model.kernels.tasks import fuse
    from tiletune.target import host_target

    path = home / "seq_model_rule.py"
    path.write_text(re.search(r"FACTORY = '''(.*?)'''", (Path(__file__).parent / "test_model_shapes.py").read_text(),
                              re.S).group(1))
    dyn = shape_tasks(load(f"{path}:make"), host_target(), "NHWC", [{"seq": 16}, {"seq": 32}])
    return dyn, fuse(dyn.symbolic, dyn.target)


def test_a_symbolic_kernel_matches_its_static_kernels_and_takes_their_configuration(attn):
    import tvm
    import tvm_ffi

    from tiletune.construct import constructions
    from tiletune.model.dynamic.shape_rule import first_correct, matches, signature
    from tiletune.schedules import make_space
    from tiletune.schedules.cpu import schedule

    dyn, fused = attn
    prims = {gv.name_hint: f for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    at16, at32 = ([k for k in d.tasks.tasks if not k.workload.key.startswith("rows:")] for d in dyn.shapes[:2])
    assert len(at16) == len(at32) == 5  # the tiling tasks (the softmax, a row task, keeps the default schedule)
    for k in at16:
        own = signature(k.func, {})
        hits = [n for n, f in prims.items() if signature(f, {"seq": 16}) == own]
        assert len(hits) == 1, k.name  # the same kernel, evaluated at seq=16
        sym = prims[hits[0]]
        template = signature(sym, {}, partial=True)
        assert matches(template, own) and any(matches(template, signature(o.func, {})) for o in at32)
        assert signature(sym, {"seq": 32}) in {signature(o.func, {}) for o in at32}
        others = [o for o in at16 if o is not k]
        assert not any(matches(template, signature(o.func, {})) for o in others), k.name
    # the QK^T kernel: seq is its innermost (vectorized) axis and its packed input's; scheduled with a
    # configuration of seq=16 it computes what TVM computes at lengths that no tile divides
    k = next(k for k in at16 if any(len(s) == 3 for s in k.inputs) and k.output[-1] == 16)
    sym = next(f for f in prims.values() if signature(f, {"seq": 16}) == signature(k.func, {}))
    space = make_space(k.workload, None, dyn.target)
    cfg = constructions("gensor", space, workload=k.workload, target=dyn.target, k=1)[0]
    cfg = space.from_dict(dict(space.to_dict(cfg), pack=0)) if "pack" in space.names else cfg
    f, how = first_correct(sym, dyn.target, [{"seq": 8}, {"seq": 21}, {"seq": 64}], [
        ("tuned", lambda: schedule(k.workload, space, cfg, dyn.target, func=sym).mod["main"])])
    assert how == "tuned" and not tvm_ffi.structural_equal(f, sym)
    # a candidate that fails is skipped; none left: the function as it is
    assert first_correct(sym, dyn.target, [{"seq": 9}], [("broken", lambda: 1 / 0)]) == (sym, "none")
