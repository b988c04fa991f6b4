"""The steps a generated model is made of (``tiletune.fuzz.generate``).

Each op is ``op(model, rng)``: it picks a live tensor it applies to (mostly the newest), decides everything
from ``rng`` and then writes one step (a forward line or a few, a submodule or constant, a description), or
writes nothing when no tensor fits. It decides before it writes, so a step that does not apply leaves the
model unchanged. Shapes are tracked exactly (``SYM`` for the symbolic first axis); an op that needs a
concrete size at an axis takes only static axes, except where the generated code is valid for every size
(``x[-1]`` on a symbolic axis of at least ``SYM_MIN``, ``roll``, ``flip``, reductions, ...).
"""
from __future__ import annotations

import math
import random

from .frame import SYM, SYM_MIN, Model, T

Rng = random.Random


def _ix(n: int, ax: int, item: str, r: Rng) -> str:
    """``[:, :, item]``; ``[..., item]`` now and then for the last axis."""
    if ax == n - 1 and n > 1 and r.random() < 0.4:
        return f"[..., {item}]"
    return "[" + ", ".join([":"] * ax + [item]) + "]"


def _dim(ax: int, n: int, r: Rng) -> int:
    """``ax`` or its negative form."""
    return ax - n if r.random() < 0.4 else ax


def _static(t: T, least: int = 1) -> list[int]:
    return [a for a, d in enumerate(t.shape) if d != SYM and d >= least]


def _with(shape: list, ax: int, size) -> list:
    return shape[:ax] + [size] + shape[ax + 1:]


def _without(shape: list, ax: int) -> list:
    return shape[:ax] + shape[ax + 1:]


def broadcast(a: list, b: list) -> list | None:
    """numpy's broadcast of two tracked shapes, None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return out[::-1]


def _param_like(m: Model, t: T, r: Rng) -> tuple[str, list]:
    """A parameter that broadcasts into ``t``: some trailing axes, a few of them 1."""
    k = r.randint(0, len(t.shape))
    shape = [1 if d == SYM or r.random() < 0.4 else d for d in t.shape[len(t.shape) - k:]]
    return m.param(shape), shape


def _expand_sizes(t: T, ax: int) -> str:
    """``expand``'s arguments to ``t``'s shape except -1 at ``ax`` (a symbolic axis by ``x.shape[i]``)."""
    return ", ".join("-1" if a == ax else f"{t.var}.shape[{a}]" if d == SYM else str(d) for a, d in enumerate(t.shape))


# --- the layer family --------------------------------------------------------------------------------------
def linear(m: Model, r: Rng) -> None:
    t = m.pick(r, lambda t: t.shape[-1] != SYM)
    if t is None:
        return
    k, n = t.shape[-1], r.randint(2, 8)
    shape = t.shape[:-1] + [n]
    if m.fits(shape):
        lin = m.layer(f"nn.Linear({k}, {n}, bias={r.random() < 0.8})")
        m.new(f"{lin}({m.use(t)})", shape, f"linear {k}->{n}")


def conv2d(m: Model, r: Rng) -> None:
    t = m.pick(r, lambda t: len(t.shape) == 4 and SYM not in t.shape[1:] and min(t.shape[2:]) >= 2)
    if t is None:
        return
    b, c, h, w = t.shape
    co, k, s = r.randint(2, 6), r.choice([1, 3, 3]), r.choice([1, 1, 2])
    p = r.choice([0, 1]) if k == 3 else 0
    if k > min(h, w) + 2 * p:
        k, p = 1, 0
    g = r.choice([x for x in (1, 1, 2, c) if c % x == 0 and co % x == 0])
    shape = [b, co, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1]
    if m.fits(shape):
        conv = m.layer(f"nn.Conv2d({c}, {co}, {k}, stride={s}, padding={p}, groups={g})")
        m.new(f"{conv}({m.use(t)})", shape, f"conv2d {c}->{co} k{k} s{s} p{p} g{g}")


def layer(m: Model, r: Rng) -> None:
    """A norm, activation or pooling layer."""
    t = m.pick(r)
    if t is None:
        return
    n = len(t.shape)
    img = n == 4 and SYM not in t.shape[1:]
    options = ["gelu", "silu", "leaky", "hardtanh", "softmax"]
    options += ["layernorm"] if t.shape[-1] != SYM else []
    options += ["batchnorm", "maxpool", "avgpool", "adaptive"] if img else []
    pick = r.choice(options)
    shape = list(t.shape)
    more: tuple = ()
    if pick == "softmax":
        code = f"nn.Softmax(dim={_dim(r.randrange(n), n, r)})"
    elif pick == "layernorm":
        code = f"nn.LayerNorm({t.shape[-1]})"
    elif pick == "batchnorm":
        code = f"nn.BatchNorm2d({t.shape[1]})"
        more = ("{m}.running_mean.uniform_(-1, 1)", "{m}.running_var.uniform_(0.5, 2)")
    elif pick in ("maxpool", "avgpool"):
        if min(t.shape[2:]) < 2:
            return
        code = f"nn.{'MaxPool2d' if pick == 'maxpool' else 'AvgPool2d'}(2)"
        shape = shape[:2] + [shape[2] // 2, shape[3] // 2]
    elif pick == "adaptive":
        code = "nn.AdaptiveAvgPool2d(1)"
        shape = shape[:2] + [1, 1]
    else:
        code = {"gelu": "nn.GELU()", "silu": "nn.SiLU()", "leaky": "nn.LeakyReLU(0.1)",
                "hardtanh": "nn.Hardtanh()"}[pick]
    mod = m.layer(code, *more)
    m.new(f"{mod}({m.use(t)})", shape, code.replace("nn.", "").replace("()", ""))


# --- elementwise ---------------------------------------------------------------------------------------------
UNARY = ["torch.relu({x})", "torch.sigmoid({x})", "torch.tanh({x})", "torch.exp({x}.clamp(-4, 4))", "{x}.abs()",
         "-{x}", "{x} * 0.5 + 1.0", "torch.clamp({x}, -1.0, 1.0)", "{x} * {x}", "torch.sin({x})",
         "torch.rsqrt({x}.abs() + 1.0)", "torch.erf({x})", "{x} ** 3", "torch.log1p({x}.abs())"]


def unary(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is not None:
        expr = r.choice(UNARY).format(x=m.use(t))
        m.new(expr, t.shape, expr.replace(t.var, "x"))


def binary(m: Model, r: Rng) -> None:
    """``x op y``: ``y`` another live tensor that broadcasts into ``x``, else a broadcasting parameter."""
    t = m.pick(r)
    if t is None:
        return
    others = [u for u in m.floats() if u is not t and broadcast(t.shape, u.shape) == t.shape]
    if others and r.random() < 0.6:
        u = r.choice(others)
        y, ydesc = m.use(u), f"y{u.shape}"
    else:
        y, ys = _param_like(m, t, r)
        ydesc = f"param{ys}"
    x = m.use(t)
    op = r.choice(["+", "-", "*", "max", "min", "div"])
    if op == "max" or op == "min":
        expr = f"torch.{op}imum({x}, {y})" if r.random() < 0.5 else f"torch.{op}imum({y}, {x})"
    elif op == "div":
        expr = f"{x} / ({y}.abs() + 1.0)"
    else:
        expr = f"{x} {op} {y}" if r.random() < 0.5 else f"{y} {op} {x}"
    ydesc = ydesc.replace(" ", "").replace("[", "(").replace("]", ")")
    m.new(expr, t.shape, f"{op}(x, {ydesc})" if op in ("max", "min") else f"x {op} {ydesc}")


def mask(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is None:
        return
    c, v = r.choice([0.0, 0.5, -0.3]), r.choice([0.0, -1.0, 3.0])
    pick = r.choice(["masked_fill", "where", "where_other", "const_mask"])
    x = t.var
    if pick == "where_other":
        others = [u for u in m.floats() if u is not t and broadcast(t.shape, u.shape) == t.shape]
        if not others:
            pick = "where"
        else:
            y = m.use(r.choice(others))
            m.new(f"torch.where({m.use(t)} < {y}, {x}, {y})", t.shape, "where(x < y, x, y)")
            return
    if pick == "const_mask" and SYM not in t.shape:
        rr = random.Random(r.random())
        bits = [rr.random() < 0.5 for _ in range(m.numel(t.shape))]
        cm = m.const(bits, t.shape, "torch.bool")
        m.new(f"{m.use(t)}.masked_fill({cm}, {v})", t.shape, f"masked_fill(const mask, {v})")
    elif pick == "where":
        m.new(f"torch.where({m.use(t)} > {c}, {x}, {x} * 0.1)", t.shape, f"where(x > {c}, x, 0.1x)")
    else:
        m.new(f"{m.use(t)}.masked_fill({x} > {c}, {v})", t.shape, f"masked_fill(x > {c}, {v})")


# --- shapes ---------------------------------------------------------------------------------------------
def _factor(n: int, k: int, r: Rng) -> list[int]:
    """``n`` as a product of ``k`` random factors (1s allowed)."""
    out = [1] * k
    p, rest = 2, n
    while rest > 1:
        while rest % p == 0:
            out[r.randrange(k)] *= p
            rest //= p
        p += 1
    return out


def reshape(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is None:
        return
    n = len(t.shape)
    if SYM not in t.shape:
        shape = _factor(m.numel(t.shape), r.randint(1, 4), r)
        if shape == t.shape:
            return
        args = [str(d) for d in shape]
        if r.random() < 0.4:
            args[r.randrange(len(args))] = "-1"
        m.new(f"{m.use(t)}.reshape({', '.join(args)})", shape, f"reshape {shape}")
        return
    runs = [a for a in range(n - 1) if t.shape[a] != SYM and t.shape[a + 1] != SYM]
    splits = [a for a in _static(t, 4) if any(t.shape[a] % f == 0 for f in (2, 3))]
    if runs and (not splits or r.random() < 0.5):
        a = r.choice(runs)
        b = a + 1
        while b + 1 < n and t.shape[b + 1] != SYM and r.random() < 0.5:
            b += 1
        shape = t.shape[:a] + [math.prod(t.shape[a:b + 1])] + t.shape[b + 1:]
        m.new(f"{m.use(t)}.flatten({_dim(a, n, r)}, {b})", shape, f"flatten({a}, {b})")
    elif splits:
        a = r.choice(splits)
        f = 2 if t.shape[a] % 2 == 0 else 3
        shape = t.shape[:a] + [f, t.shape[a] // f] + t.shape[a + 1:]
        m.new(f"{m.use(t)}.unflatten({_dim(a, n, r)}, ({f}, -1))", shape, f"unflatten({a}, {f}x)")
    elif n < 5:
        a = r.randint(0, n)
        m.new(f"{m.use(t)}.unsqueeze({a})", t.shape[:a] + [1] + t.shape[a:], f"unsqueeze({a})")


def permute(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is None:
        return
    n = len(t.shape)
    ones = [a for a, d in enumerate(t.shape) if d == 1]
    pick = r.choice(["permute", "transpose", "unsqueeze", "squeeze" if ones and n > 1 else "permute"])
    if pick == "unsqueeze" and n < 5:
        a = r.randint(-n - 1, n)
        at = a % (n + 1)
        m.new(f"{m.use(t)}.unsqueeze({a})", t.shape[:at] + [1] + t.shape[at:], f"unsqueeze({a})")
    elif pick == "squeeze":
        a = r.choice(ones)
        m.new(f"{m.use(t)}.squeeze({_dim(a, n, r)})", _without(t.shape, a), f"squeeze({a})")
    elif n >= 2 and pick == "transpose":
        a, b = r.sample(range(n), 2)
        shape = list(t.shape)
        shape[a], shape[b] = shape[b], shape[a]
        m.new(f"{m.use(t)}.transpose({_dim(a, n, r)}, {_dim(b, n, r)})", shape, f"transpose({a}, {b})")
    elif n >= 2:
        perm = list(range(n))
        while perm == sorted(perm):
            r.shuffle(perm)
        m.new(f"{m.use(t)}.permute({', '.join(map(str, perm))})", [t.shape[p] for p in perm], f"permute{tuple(perm)}")


def reduce(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is None:
        return
    n = len(t.shape)
    fn = r.choice(["sum", "mean", "amax", "amin", "max"])
    keep = r.random() < 0.4
    axes = sorted(r.sample(range(n), 1 if fn == "max" else r.randint(1, n)))
    if not keep and len(axes) == n and n > 1 and r.random() < 0.8:
        axes = axes[:-1]
    dims = [_dim(a, n, r) for a in axes]
    shape = [1 if a in axes else d for a, d in enumerate(t.shape)] if keep else \
        [d for a, d in enumerate(t.shape) if a not in axes]
    if fn == "max":
        expr = f"{m.use(t)}.max(dim={dims[0]}, keepdim={keep}).values"
    else:
        expr = f"torch.{fn}({m.use(t)}, dim={tuple(dims) if len(dims) > 1 else dims[0]}, keepdim={keep})"
    m.new(expr, shape, f"{fn}{tuple(axes)}{' keepdim' if keep else ''}")


def concat(m: Model, r: Rng) -> None:
    """``cat`` with another live tensor of a fitting shape or a slice/flip of the same one; or ``stack``."""
    t = m.pick(r)
    if t is None:
        return
    n, x = len(t.shape), t.var
    axes = _static(t)
    if r.random() < 0.3 or not axes:  # stack
        same = [u for u in m.floats() if u is not t and u.shape == t.shape]
        u = r.choice(same) if same and r.random() < 0.6 else None
        d = r.randint(-n - 1, n)
        shape = t.shape[:d % (n + 1)] + [2] + t.shape[d % (n + 1):]
        if m.fits(shape):
            y = m.use(u) if u else f"torch.tanh({x})"
            m.new(f"torch.stack([{m.use(t)}, {y}], dim={d})", shape, f"stack(dim={d})")
        return
    ax = r.choice(axes)
    fit = [u for u in m.floats() if u is not t and len(u.shape) == n and u.shape[ax] != SYM
           and all(a == ax or u.shape[a] == t.shape[a] for a in range(n))]
    u = r.choice(fit) if fit and r.random() < 0.6 else None
    if u:
        y, k = u.var, u.shape[ax]
    else:
        k = r.randint(1, t.shape[ax])
        y = f"{x}.flip({ax})" if k == t.shape[ax] and r.random() < 0.5 else f"{x}{_ix(n, ax, f':{k}', r)}"
    shape = _with(t.shape, ax, t.shape[ax] + k)
    if m.fits(shape):
        if u:
            m.use(u)
        pair = [m.use(t), y] if r.random() < 0.5 else [y, m.use(t)]
        m.new(f"torch.cat([{', '.join(pair)}], dim={_dim(ax, n, r)})", shape, f"cat(dim={ax})")


def expand(m: Model, r: Rng) -> None:
    t = m.pick(r, lambda t: len(t.shape) < 5)
    if t is None:
        return
    n, x = len(t.shape), t.var
    ones = [a for a, d in enumerate(t.shape) if d == 1]
    e = r.randint(2, 3)
    pick = r.choice(["new", "ones" if ones else "new", "repeat", "interleave"])
    if pick == "new":
        a = r.randint(0, n)
        shape = t.shape[:a] + [e] + t.shape[a:]
        sizes = ", ".join(["-1"] * a + [str(e)] + ["-1"] * (n - a))
        expr, desc = f"{x}.unsqueeze({a}).expand({sizes})", f"unsqueeze({a}).expand({e})"
    elif pick == "ones":
        a = r.choice(ones)
        shape = _with(t.shape, a, e)
        sizes = ", ".join(str(e) if i == a else "-1" for i in range(n))
        expr, desc = f"{x}.expand({sizes})", f"expand(axis {a} to {e})"
    elif pick == "repeat":
        reps = [1] * n
        a = r.randrange(n)
        reps[a] = 1 if t.shape[a] == SYM else e
        shape = [d * k if d != SYM else d for d, k in zip(t.shape, reps)]
        expr, desc = f"{x}.repeat({', '.join(map(str, reps))})", f"repeat{tuple(reps)}"
    else:
        axes = _static(t)
        if not axes:
            return
        a = r.choice(axes)
        shape = _with(t.shape, a, t.shape[a] * e)
        expr, desc = f"{x}.repeat_interleave({e}, dim={_dim(a, n, r)})", f"repeat_interleave({e}, dim={a})"
    if m.fits(shape):
        m.use(t)
        m.new(expr, shape, desc)


# --- slicing and constant indices -------------------------------------------------------------------------------
def _bound(n: int, r: Rng):
    return r.choice([None, None, 0, -1, n, n + 5, -n - 5, r.randint(-n - 2, n + 2), r.randint(-n - 2, n + 2)])


def slice_(m: Model, r: Rng) -> None:
    """``x[:, a:b:s]`` with negative and out-of-range bounds and steps, on one or two static axes."""
    t = m.pick(r, lambda t: bool(_static(t)))
    if t is None:
        return
    n = len(t.shape)
    axes = sorted(r.sample(_static(t), min(len(_static(t)), r.choice([1, 1, 2]))))
    items, shape = [":"] * n, list(t.shape)
    for ax in axes:
        size = t.shape[ax]
        for _ in range(20):
            a, b, s = _bound(size, r), _bound(size, r), r.choice([None, None, 1, 2, 3])
            k = len(range(*slice(a, b, s).indices(size)))
            if k >= 1:
                break
        else:
            a, b, s, k = -1, None, None, 1
        items[ax] = f"{'' if a is None else a}:{'' if b is None else b}" + ("" if s is None else f":{s}")
        shape[ax] = k
    if len(axes) == 1:
        sub = _ix(n, axes[0], items[axes[0]], r)
    else:
        sub = "[" + ", ".join(items[:axes[-1] + 1]) + "]"
    m.new(f"{m.use(t)}{sub}", shape, f"x{sub}")


def index_const(m: Model, r: Rng) -> None:
    """Constant indices at the boundaries and negative: ``x[:, -1]``, ``select``, ``narrow(d, -k, k)``,
    ``index_select``, ``x[:, tensor([-1, 0])]``, ``roll``, ``flip``, ``unbind``, ``chunk``, ``split``."""
    t = m.pick(r)
    if t is None:
        return
    n, x = len(t.shape), t.var
    ax = r.randrange(n)
    size = t.shape[ax]
    dropping = ["ix", "select", "unbind"] if n >= 2 else []
    if size == SYM:
        options = ["roll", "flip"] + dropping[:2]
        idx = [0, 1, -1, -SYM_MIN]
    else:
        options = ["narrow", "index_select", "adv", "roll", "flip", "chunk", "split"] + dropping
        idx = sorted({-1, -size, size - 1, 0, -2 % size - size, size // 2})
    pick = r.choice(options)
    d = _dim(ax, n, r)
    if pick in ("ix", "select", "unbind"):
        i = r.choice(idx)
        expr = {"ix": f"{x}{_ix(n, ax, str(i), r)}", "select": f"{x}.select({d}, {i})",
                "unbind": f"{x}.unbind({d})[{i}]"}[pick]
        if pick == "ix" and ax == 0 and r.random() < 0.5:
            expr = f"{x}[{i}]"
        shape, desc = _without(t.shape, ax), expr.replace(x, "x")
    elif pick == "narrow":
        k = r.randint(1, size)
        start = r.choice([-k, size - k, 0, -size])
        expr = f"{x}.narrow({d}, {start}, {k})"
        shape, desc = _with(t.shape, ax, k), f"narrow({ax}, {start}, {k})"
    elif pick in ("index_select", "adv"):
        k = r.randint(1, 4)
        low = -size if pick == "adv" else 0
        vals = [r.randrange(low, size) for _ in range(k)]
        vals[0] = r.choice([-1, size - 1, 0]) if pick == "adv" else r.choice([size - 1, 0])
        c = m.const(vals)
        expr = f"{x}.index_select({d}, {c})" if pick == "index_select" else f"{x}{_ix(n, ax, c, r)}"
        shape, desc = _with(t.shape, ax, k), f"{pick}({ax}, {vals})"
    elif pick == "roll":
        k = r.choice([-1, -2, 1, 3, -SYM_MIN - 1] if size == SYM else [-1, -size, -size - 1, 1, size + 1, -2])
        expr = f"torch.roll({x}, shifts={k}, dims={d})"
        shape, desc = t.shape, f"roll({k}, {ax})"
    elif pick == "flip":
        axes = sorted(r.sample(range(n), r.randint(1, n)))
        expr = f"{x}.flip({', '.join(str(_dim(a, n, r)) for a in axes)})"
        shape, desc = t.shape, f"flip{tuple(axes)}"
    else:  # chunk, split: one piece
        c = r.randint(2, 4)
        piece = math.ceil(size / c) if pick == "chunk" else r.randint(1, size)
        count = math.ceil(size / piece)
        i = r.randrange(-count, count)
        k = min(piece, size - (i % count) * piece)
        expr = f"{x}.chunk({c}, {d})[{i}]" if pick == "chunk" else f"{x}.split({piece}, {d})[{i}]"
        shape, desc = _with(t.shape, ax, k), expr.replace(x, "x")
    if m.fits(shape):
        m.use(t)
        m.new(expr, shape, desc)


# --- run-time indices ---------------------------------------------------------------------------------------
def index_runtime(m: Model, r: Rng) -> None:
    """An integer input as indices: ``index_select``, ``x[:, idx]``, ``gather``, ``scatter_add``."""
    ids = [u for u in m.live if u.kind == "i" and len(u.shape) == 1 and u.high]
    if not ids:
        return
    i = ids[0]
    k, high = i.shape[0], i.high
    t = m.pick(r, lambda t: bool(_static(t, max(high, k))))
    if t is None:
        return
    n, x = len(t.shape), t.var
    ax = r.choice(_static(t, max(high, k)))
    d = _dim(ax, n, r)
    pick = r.choice(["index_select", "adv", "gather", "scatter_add"])
    shaped = f"{i.var}.reshape({', '.join(str(k) if a == ax else '1' for a in range(n))})"
    if pick == "index_select":
        expr, shape = f"{x}.index_select({d}, {i.var})", _with(t.shape, ax, k)
    elif pick == "adv":
        expr, shape = f"{x}{_ix(n, ax, i.var, r)}", _with(t.shape, ax, k)
    elif pick == "gather":
        expr, shape = f"torch.gather({x}, {d}, {shaped}.expand({_expand_sizes(t, ax)}))", _with(t.shape, ax, k)
    else:
        src = f"{x}.narrow({d}, 0, {k})"
        expr = f"torch.zeros_like({x}).scatter_add({d}, {shaped}.expand({_expand_sizes(t, ax)}), {src})"
        shape = t.shape
    m.use(i)
    m.use(t)
    m.new(expr, shape, f"{pick}(axis {ax}, run-time index)")


def scatter_const(m: Model, r: Rng) -> None:
    """``scatter_add`` / ``index_add`` into zeros with constant indices (duplicates summed)."""
    t = m.pick(r, lambda t: SYM not in t.shape)
    if t is None:
        return
    n, x = len(t.shape), t.var
    ax = r.randrange(n)
    out = r.randint(1, t.shape[ax] + 1)
    shape = _with(t.shape, ax, out)
    d = _dim(ax, n, r)
    zeros = f"{x}.new_zeros({', '.join(map(str, shape))})"
    if r.random() < 0.6:
        c = m.const([r.randrange(out) for _ in range(m.numel(t.shape))], t.shape)
        expr, desc = f"{zeros}.scatter_add({d}, {c}, {m.use(t)})", f"scatter_add(axis {ax} into {out})"
    else:
        c = m.const([r.randrange(out) for _ in range(t.shape[ax])])
        expr, desc = f"{zeros}.index_add({d}, {c}, {m.use(t)})", f"index_add(axis {ax} into {out})"
    if m.fits(shape):
        m.new(expr, shape, desc)


# --- scans, sorting, contractions -------------------------------------------------------------------------------
def cumsum(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is not None:
        n = len(t.shape)
        ax = r.randrange(n)
        m.new(f"torch.cumsum({m.use(t)}, dim={_dim(ax, n, r)})", t.shape, f"cumsum({ax})")


def sort(m: Model, r: Rng) -> None:
    """``sort`` / ``topk`` / ``argmax`` / ``argmin``: the values, and the input gathered at the indices (an extra
    output), so that ties do not matter."""
    t = m.pick(r)
    if t is None:
        return
    n, x = len(t.shape), t.var
    ax = r.randrange(n)
    d = _dim(ax, n, r)
    pick = r.choice(["sort", "topk", "argmax", "argmin"] if t.shape[ax] != SYM else ["sort", "argmax"])
    m.use(t)
    if pick in ("argmax", "argmin"):
        m.new(f"torch.gather({x}, {d}, {x}.{pick}(dim={d}, keepdim=True))", _with(t.shape, ax, 1),
              f"gather at {pick}({ax})")
        return
    if pick == "sort":
        desc = r.random() < 0.5
        call, shape = f"torch.sort({x}, dim={d}, descending={desc})", t.shape
    else:
        k = r.randint(1, t.shape[ax])
        large = r.random() < 0.7
        call, shape = f"torch.topk({x}, {k}, dim={d}, largest={large})", _with(t.shape, ax, k)
    s = m.new(call, shape, call.replace(x, "x"), kind="tuple")
    m.new(f"{s.var}.values", shape, "values")
    g = m.new(f"torch.gather({x}, {d}, {s.var}.indices)", shape, "gather at indices")
    m.outputs.append(g.var)


def einsum(m: Model, r: Rng) -> None:
    t = m.pick(r)
    if t is None:
        return
    n, x = len(t.shape), t.var
    letters = "abcde"[:n]
    options = ["param"] if t.shape[-1] != SYM else []
    options += ["transpose", "gram"] if n >= 2 else []
    options += ["reduce"] if n >= 2 else []
    if not options:
        return
    pick = r.choice(options)
    if pick == "param":
        k, j = t.shape[-1], r.randint(2, 6)
        w = m.param([k, j])
        eq, args, shape = f"{letters},{letters[-1]}z->{letters[:-1]}z", f"{x}, {w}", t.shape[:-1] + [j]
    elif pick == "transpose":
        eq, args = "...ij->...ji", x
        shape = t.shape[:-2] + [t.shape[-1], t.shape[-2]]
    elif pick == "gram":
        eq, args = "...ij,...kj->...ik", f"{x}, {x}"
        shape = t.shape[:-1] + [t.shape[-2]]
    else:
        ax = r.randrange(n)
        eq, args, shape = f"{letters}->{letters.replace(letters[ax], '')}", x, _without(t.shape, ax)
    if m.fits(shape):
        m.use(t)
        m.new(f"torch.einsum('{eq}', {args})", shape, f"einsum {eq}")


def output(m: Model, r: Rng) -> None:
    """Return a live (computed) tensor as one more output."""
    c = [u for u in m.live if u.kind == "f" and u.var.startswith("v") and u.var not in m.outputs]
    if c:
        u = c[-1] if r.random() < 0.5 else r.choice(c)
        m.outputs.append(u.var)
        m.desc.append(f"output {u.var}")


OPS = {f.__name__.rstrip("_"): f for f in (linear, conv2d, layer, unary, binary, mask, reshape, permute, reduce,
                                            concat, expand, slice_, index_const, index_runtime, scatter_const,
                                            cumsum, sort, einsum, output)}
#: how often ``generate`` draws each op (indices and slices most: where wrong results hide)
WEIGHTS = {"linear": 3, "conv2d": 2, "layer": 2, "unary": 2, "binary": 3, "mask": 2, "reshape": 2, "permute": 2,
           "reduce": 2, "concat": 2, "expand": 1, "slice": 3, "index_const": 5, "index_runtime": 3,
           "scatter_const": 1, "cumsum": 1, "sort": 1, "einsum": 1, "output": 1}
