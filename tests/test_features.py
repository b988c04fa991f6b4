"""Feature extraction: fixed shapes from real TVM lowering (small gemm and conv2d), curve (n=30) vs
curve1, knob without TVM, the worker pool, and the errors."""
import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.features import make_extractor
from tiletune.features.knob import KnobExtractor, knob_dim
from tiletune.space import Space
from tiletune.workloads import parse

SPECS = ["gemm:M=32,N=32,K=16", "conv2d:C=8,H=8,W=8,K=16,R=3,S=3,stride=2,pad=1"]


def setup(spec):
    wl = parse(spec)
    space = Space.from_axes(wl.axes(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    configs = space.sample_unique(np.random.default_rng(0), 6) + [space.untiled()]
    return wl, space, configs


def test_knob_features_without_tvm():
    wl, space, configs = setup(SPECS[0])
    ex = KnobExtractor(space)
    X = ex.extract(configs)
    assert X.shape == (len(configs), knob_dim(space)) == (len(configs), 11)
    assert np.allclose(X[-1, :4], [5, 0, 0, 0])  # untiled m: log2 of (32, 1, 1, 1)
    assert np.array_equal(ex.table(np.array([[space.knobs[i].index(v) for i, v in enumerate(c.values)]
                                              for c in configs])), X)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("kind", ["itervar", "curve", "curve1"])
def test_tvm_features_fixed_shape(spec, kind):
    wl, space, configs = setup(spec)
    ex = make_extractor(kind, space, wl, None, workers=0)
    X = ex.extract(configs)
    assert X.shape == (len(configs), ex.dim)
    assert np.isfinite(X).all()
    assert len({x.tobytes() for x in X}) >= len(configs) - 1  # configurations are told apart
    assert ex.stats["computed"] == len(configs) and ex.stats["failures"] == 0
    ex.extract(configs[:2])
    assert ex.stats["cache_hits"] == 2


def test_itervar_layout_same_for_two_shapes_of_one_operator():
    a = setup("gemm:M=32,N=32,K=16")
    b = setup("gemm:M=64,N=16,K=32")
    ea = make_extractor("itervar", a[1], a[0], None, workers=0)
    eb = make_extractor("itervar", b[1], b[0], None, workers=0)
    assert ea.dim == eb.dim
    ec = make_extractor("itervar", *setup(SPECS[1])[1::-1], None, workers=0)
    assert ec.dim != ea.dim  # another operator: another loop nest


def test_curve_differs_from_curve1_and_transfers_across_kinds():
    dims = {}
    for spec in SPECS:
        wl, space, configs = setup(spec)
        c30 = make_extractor("curve", space, wl, None, workers=0)
        c1 = make_extractor("curve1", space, wl, None, workers=0)
        X30, X1 = c30.extract(configs), c1.extract(configs)
        assert X30.shape[1] != X1.shape[1]
        # n=30 samples carry more information: more non-zeros per configuration
        assert np.count_nonzero(X30) > 3 * np.count_nonzero(X1)
        dims[spec] = (c30.dim, c1.dim)
    assert dims[SPECS[0]] == dims[SPECS[1]]  # fixed length across operator kinds


def test_rejected_configuration_gives_zeros():
    wl = parse("gemm:M=8,N=256,K=8")
    space = Space.from_axes(wl.axes(), levels=(4, 2), choices={"unroll": (0, 16)})
    bad = space.from_dict({"tile_m": [8, 1, 1, 1], "tile_n": [1, 1, 1, 256], "tile_k": [8, 1], "unroll": 0})
    ex = make_extractor("curve1", space, wl, None, workers=0)
    X = ex.extract([bad])
    assert not X.any() and ex.stats["failures"] == 1


def test_tvm_features_need_workload():
    wl, space, _ = setup(SPECS[0])
    for kind in ("itervar", "curve", "curve1"):
        with pytest.raises(TiletuneError, match="workload"):
            make_extractor(kind, space, None)
    with pytest.raises(TiletuneError, match="accepted"):
        make_extractor("ast", space, wl)


def test_worker_pool_matches_in_process():
    wl, space, configs = setup(SPECS[0])
    local = make_extractor("itervar", space, wl, None, workers=0).extract(configs[:3])
    ex = make_extractor("itervar", space, wl, None, workers=1)
    try:
        pooled = ex.extract(configs[:3])
        assert ex.stats["worker_seconds"] > 0
    finally:
        ex.close()
    assert np.array_equal(local, pooled)


def test_transfer_curve_across_kinds_itervar_not(tmp_path):
    from tiletune.records import Record, RecordWriter
    from tiletune.schedules import make_space
    from tiletune.strategies import TuneContext, create

    conv = parse(SPECS[1])
    cspace = make_space(conv)
    path = tmp_path / "conv.jsonl"
    with RecordWriter(path) as w:
        for i, c in enumerate(cspace.sample_unique(np.random.default_rng(0), 12)):
            w.write(Record(workload=conv.key, target="t", config=cspace.to_dict(c), costs=(1e-3 + i * 1e-4,),
                           median_s=1e-3 + i * 1e-4))
    gemm = parse(SPECS[0])
    ctx = TuneContext(workload=gemm, transfer=(str(path),))
    s = create("xgb", make_space(gemm), context=ctx, options={"feature": "curve", "workers": 0})
    assert s.model.fitted and [b.workloads for b in s.model.background] == [(conv.key,)]
    assert len(s.ask(4)) == 4  # proposals from the transferred model
    with pytest.raises(TiletuneError, match="itervar"):
        create("xgb", make_space(gemm), context=ctx, options={"feature": "itervar", "workers": 0})
