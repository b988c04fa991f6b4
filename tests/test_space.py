import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.space import Action, Config, Space, factorizations, parse_levels
from tiletune.workloads import parse


@pytest.mark.parametrize("n,size", [(512, 484_000), (1024, 899_756), (2048, 1_589_952)])
def test_gbfs_paper_space_sizes(n, size):
    wl = parse(f"gemm:M={n},N={n},K={n}")
    assert Space.from_axes(wl.axes_no_tvm(), levels=(4, 2)).size == size


def test_factorizations_are_exact_and_unique():
    fs = factorizations(360, 3)
    assert len(fs) == len(set(fs))
    assert all(a * b * c == 360 for a, b, c in fs)
    assert factorizations(7, 2) == [(1, 7), (7, 1)]


def test_index_bijection_roundtrip():
    sp = Space.from_axes(parse("gemm:M=768,N=1000,K=197").axes_no_tvm(), choices={"unroll": (0, 16, 64)})
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = sp.sample(rng)
        assert sp.get(sp.index(c)) == c
    assert sp.index(sp.get(0)) == 0
    assert sp.index(sp.get(sp.size - 1)) == sp.size - 1
    small = Space.from_axes(parse("gemm:M=8,N=6,K=4").axes_no_tvm(), levels=(2, 2))
    assert sorted(small.index(small.get(i)) for i in range(small.size)) == list(range(small.size))
    with pytest.raises(TiletuneError):
        sp.get(sp.size)


def test_actions_on_powers_of_two_are_the_papers():
    sp = Space.from_axes(parse("gemm:M=64,N=64,K=64").axes_no_tvm())
    # only p=2: 12 ordered pairs for each 4-level axis, 2 for the 2-level axis
    assert all(a.p == 2 for a in sp.actions)
    assert len(sp.actions) == 12 + 12 + 2
    s0 = sp.untiled()
    assert s0.values == ((64, 1, 1, 1), (64, 1, 1, 1), (64, 1))
    nb = sp.neighbours(s0)
    # from the untiled state only level 0 can give a factor 2: 3 + 3 + 1 moves
    assert len(nb) == 7
    assert Config(((32, 2, 1, 1), (64, 1, 1, 1), (64, 1))) in nb


def test_prime_moves_on_odd_extents():
    sp = Space.from_axes(parse("gemm:M=197,N=1000,K=768").axes_no_tvm())
    assert {a.p for a in sp.actions if a.knob == 0} == {197}
    assert {a.p for a in sp.actions if a.knob == 1} == {2, 5}
    assert {a.p for a in sp.actions if a.knob == 2} == {2, 3}
    rng = np.random.default_rng(1)
    for _ in range(50):
        c = sp.sample(rng)
        for n in sp.neighbours(c):
            assert sp.is_legal(n)
            diff = [i for i in range(3) if n[i] != c[i]]
            assert len(diff) == 1


def test_step_illegal_returns_none():
    sp = Space.from_axes(parse("gemm:M=8,N=8,K=8").axes_no_tvm())
    s0 = sp.untiled()
    assert sp.step(s0, Action(0, 0, 1, 2)) is None  # level 1 has no factor 2 to give


def test_hop_neighbour_counts_match_paper():
    # 3 choice-like coordinates with room on both sides: 6, 12, 8
    from tiletune.space import ChoiceKnob

    sp = Space([ChoiceKnob("a", (1, 2, 3)), ChoiceKnob("b", (1, 2, 3)), ChoiceKnob("c", (1, 2, 3))])
    c = Config((2, 2, 2))
    assert [len(sp.hop_neighbours(c, n)) for n in (1, 2, 3)] == [6, 12, 8]


def test_hop_neighbours_keep_products_exact():
    sp = Space.from_axes(parse("gemm:M=96,N=40,K=36").axes_no_tvm())
    rng = np.random.default_rng(2)
    for _ in range(20):
        c = sp.sample(rng)
        for n in sp.hop_neighbours(c, 2):
            assert sp.is_legal(n)


def test_sample_uniform_and_encode():
    sp = Space.from_axes(parse("gemm:M=8,N=8,K=4").axes_no_tvm(), levels=(2, 2))
    rng = np.random.default_rng(0)
    counts = np.zeros(sp.size)
    for _ in range(4000):
        counts[sp.index(sp.sample(rng))] += 1
    assert counts.min() > 0
    v = sp.encode(sp.get(5))
    assert v.shape == (sp.encoding_size,) and np.all((v >= 0) & (v <= 1))


def test_levels_parsing_and_errors():
    assert parse_levels("4,2") == (4, 2)
    assert parse_levels("m=3,n=2,k=1") == {"m": 3, "n": 2, "k": 1}
    with pytest.raises(TiletuneError):
        parse_levels("four")
    axes = parse("gemm:M=8,N=8,K=4").axes_no_tvm()
    with pytest.raises(TiletuneError, match="axis"):
        Space.from_axes(axes, levels={"m": 2, "n": 2})
    with pytest.raises(TiletuneError):
        Space.from_axes(axes, levels={"m": 2, "n": 2, "k": 1, "z": 3})


def test_dict_roundtrip_and_bad_config():
    sp = Space.from_axes(parse("gemm:M=8,N=8,K=4").axes_no_tvm(), choices={"unroll": (0, 16)})
    c = sp.get(17)
    assert sp.from_dict(sp.to_dict(c)) == c
    with pytest.raises(TiletuneError):
        sp.from_dict({"tile_m": [3, 3, 1, 1], "tile_n": [8, 1, 1, 1], "tile_k": [4, 1], "unroll": 0})
