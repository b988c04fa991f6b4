"""The weight-block rule of a model's matmul (tiletune.schedules.cpu.WeightReuse, docs/decisions/weight-block.md):
row loops that re-read the weight block of their columns may do so only while it fits one core's L2; carried by the
register-tile constraint of the space, refused by the template's check, honoured by sampling."""
import numpy as np
import pytest

import tiletune.schedules.cpu as cpu
from tiletune.hardware import l2_bytes
from tiletune.schedules import make_space
from tiletune.schedules.cpu import InvalidConfig, RegisterTile, check
from tiletune.target import host_target

AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}


def _matmul(m: int, k: int, n: int, weight: bool = True):
    """matmul + bias as a model's fused kernel; ``weight``: its [k, n] matrix is a model constant."""
    from tvm import te, topi

    from tiletune.workloads.primfunc import PrimFuncWorkload

    a, w, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="w"), te.placeholder((n,), name="b")
    f = te.create_prim_func([a, w, b, topi.add(topi.matmul(a, w), b)])
    return PrimFuncWorkload.from_prim_func(f.with_attr("layout_free_buffers", [1]) if weight else f, "fused_mm")


def test_l2_bytes_of_this_machine_and_none_for_another_cpu():
    assert l2_bytes(host_target()) > 0 and l2_bytes(None) == l2_bytes(host_target())
    assert l2_bytes({"kind": "llvm", "mcpu": "cortex-a72"}) is None


@pytest.mark.tvm
def test_row_loops_may_reread_only_a_weight_block_that_fits_the_l2(monkeypatch):
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 64 * 1024)
    wl = _matmul(16, 500, 96)  # K = 500 floats: 2000 bytes of weight per column
    space = make_space(wl, None, AVX512)
    rule = space.constraint
    assert isinstance(rule, RegisterTile) and rule.reuse is not None
    assert (rule.reuse.l2_bytes, rule.reuse.col_bytes) == (64 * 1024, 2000)
    base = space.to_dict(space.untiled())

    def config(i0, i1):
        return space.from_dict({**base, "tile_ax0": i0, "tile_ax1": i1})

    # two row blocks re-read 96 columns x 2000 bytes = 187.5 KiB > half of 64 KiB: refused, with the reason
    bad = config([1, 2, 1, 8], [1, 1, 2, 48])
    assert not space.allows(bad)
    with pytest.raises(InvalidConfig, match=r"re-read a weight block of 0.18 MiB 2 times"):
        check(wl, space, bad)
    # the cores splitting the rows: each streams the whole 187.5 KiB weight, more than the L2: refused
    split = config([2, 1, 1, 8], [1, 1, 2, 48])
    assert not space.allows(split)
    with pytest.raises(InvalidConfig, match=r"the cores split the rows 2 ways, so each streams the whole weight of "
                                            r"0.18 MiB"):
        check(wl, space, split)
    # the cores splitting the columns, the row loops re-reading a 16-column block of 31 KiB (< 32 KiB): allowed
    ok = config([1, 2, 1, 8], [6, 1, 1, 16])
    assert space.allows(ok)
    check(wl, space, ok)
    assert "weight block that row loops re-read fits 50% of one core's L2 (0.03 MiB)" in rule.describe()
    samples = space.sample_unique(np.random.default_rng(0), 200)
    assert samples and all(rule.reuse(space, c) for c in samples)
    assert not [c for c in samples if rule.reuse.row_chunks(c) > 1]


@pytest.mark.tvm
def test_the_cores_may_split_the_rows_of_a_weight_that_fits_the_l2(monkeypatch):
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 512 * 1024)
    wl = _matmul(16, 500, 96)  # the whole weight 187.5 KiB, re-read by the S1 row loops too (within half the L2)
    space = make_space(wl, None, AVX512)
    base = space.to_dict(space.untiled())
    split = space.from_dict({**base, "tile_ax0": [2, 2, 1, 4], "tile_ax1": [1, 1, 2, 48]})
    assert space.allows(split)
    check(wl, space, split)


@pytest.mark.tvm
def test_no_rule_without_a_weight_or_a_known_l2(monkeypatch):
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 64 * 1024)
    assert make_space(_matmul(16, 500, 96, weight=False), None, AVX512).constraint.reuse is None
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: None)
    assert make_space(_matmul(16, 500, 96), None, AVX512).constraint.reuse is None
