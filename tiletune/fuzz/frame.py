"""The vocabulary of a generated model: its ``Spec`` (seed and steps), the tensors it tracks (``T``), the model
under construction (``Model``, which the ops of ``tiletune.fuzz.ops`` write into) and the ``Generated`` source.
``tiletune.fuzz.generate`` draws and builds models from them (its docstring gives the design choices)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

#: the most elements of any tensor of a generated model
LIMIT = 2048
#: a symbolic dimension in a tracked shape (its example value is ``Model.batch``)
SYM = "B"
#: the symbolic dimension's bounds (torch.export specialises sizes 0 and 1)
SYM_MIN, SYM_MAX = 2, 6


@dataclass(frozen=True)
class Spec:
    """A generated model: its seed and its steps, ``(position, op name)`` in order."""
    seed: int
    steps: tuple[tuple[int, str], ...]

    def without(self, drop: set[int]) -> "Spec":
        return Spec(self.seed, tuple(s for s in self.steps if s[0] not in drop))

    def to_json(self) -> dict:
        return {"seed": self.seed, "steps": [list(s) for s in self.steps]}

    @staticmethod
    def from_json(d: dict) -> "Spec":
        return Spec(int(d["seed"]), tuple((int(i), str(op)) for i, op in d["steps"]))


@dataclass
class T:
    """A tensor of the forward: its variable, shape (ints, ``SYM`` for the symbolic axis) and kind."""
    var: str
    shape: list
    kind: str = "f"  # "f": float; "i": an integer index input, values below ``high``
    high: int = 0


@dataclass
class Generated:
    spec: Spec
    code: str  # the module's source (see the module docstring)
    description: str  # its ops, one line
    dynamic: bool

    def load(self):
        """``(module, example_inputs, dynamic_shapes)`` from the source (``dynamic_shapes`` None if static)."""
        ns: dict = {"__name__": f"tiletune_fuzz_{self.spec.seed}"}
        exec(compile(self.code, f"<fuzz seed {self.spec.seed}>", "exec"), ns)
        got = ns["model"]()
        return (*got, None) if len(got) == 2 else got


class Model:
    """The model being written: its inputs, ``__init__`` and ``forward`` lines, live tensors, outputs."""

    def __init__(self, seed: int):
        self.seed = seed
        r = random.Random(f"{seed}:frame")
        self.dynamic = r.random() < 0.25
        self.batch = r.randint(SYM_MIN, 4)
        self.inputs: list[tuple[T, str]] = []  # (tensor, its example expression)
        self.inits: list[str] = []
        self.lines: list[str] = []
        self.live: list[T] = []
        self.outputs: list[str] = []
        self.desc: list[str] = []
        self.read: set[str] = set()
        self.n = 0
        self._frame(r)

    # --- the frame: inputs -------------------------------------------------------------------------------
    def _frame(self, r: random.Random) -> None:
        b = SYM if self.dynamic else r.randint(1, 3)
        kind = r.choice(["seq", "seq", "image", "flat", "tokens"])
        if kind == "tokens":
            vocab, t, d = r.randint(5, 12), r.randint(2, 6), r.randint(3, 8)
            ids = self._input([b, t], "i", vocab, r)
            emb = self.layer(f"nn.Embedding({vocab}, {d})")
            self.read.add(ids.var)
            self.new(f"{emb}({ids.var})", [b, t, d], desc=f"embedding {vocab}x{d}")
        else:
            shape = {"seq": [b, r.randint(2, 6), r.randint(3, 10)], "image": [b, r.randint(2, 4), r.randint(3, 7),
                                                                                r.randint(3, 7)],
                     "flat": [b, r.randint(3, 16)]}[kind]
            self._input(shape, "f", 0, r)
            if r.random() < 0.3:  # a second float input: the same shape, or one that broadcasts
                self._input([1 if d == SYM or r.random() < 0.3 else d for d in shape][r.randint(0, 1):] if
                            r.random() < 0.5 else list(shape), "f", 0, r)
        if r.random() < 0.3:  # a run-time index input (gather, index_select, advanced indexing, scatter_add)
            self._input([r.randint(1, 4)], "i", r.randint(2, 4), r)

    def _input(self, shape: list, kind: str, high: int, r: random.Random) -> T:
        t = T(f"x{len(self.inputs)}", list(shape), kind, high)
        if kind == "f":
            dims = ", ".join(str(self.batch if d == SYM else d) for d in shape)
            ex = f"torch.randn({dims}, generator=g)"
        else:
            n = math.prod(self.batch if d == SYM else d for d in shape)
            vals = [r.randrange(high) for _ in range(n)]
            vals[r.randrange(n)] = high - 1  # the example holds the largest valid index (source.random_inputs)
            shaped = ", ".join(str(self.batch if d == SYM else d) for d in shape)
            ex = f"torch.tensor({vals}).reshape({shaped})"
        self.inputs.append((t, ex))
        self.live.append(t)
        return t

    # --- what steps call ----------------------------------------------------------------------------------
    def size(self, d) -> int:
        return self.batch if d == SYM else d

    def numel(self, shape) -> int:
        return math.prod(self.size(d) for d in shape)

    def fits(self, shape) -> bool:
        return 1 <= self.numel(shape) <= LIMIT and len(shape) <= 5

    def new(self, expr: str, shape: list, desc: str, kind: str = "f") -> T:
        t = T(f"v{self.n}", list(shape), kind)
        self.n += 1
        self.lines.append(f"{t.var} = {expr}")
        self.live.append(t)
        self.desc.append(desc)
        return t

    def _attr(self, prefix: str) -> str:
        self.n += 1
        return f"self.{prefix}{self.n}"

    def layer(self, code: str, *more: str) -> str:
        """A submodule; ``more``: statements on it (``{m}`` names it), e.g. to randomise running stats."""
        name = self._attr("m")
        self.inits.append(f"{name} = {code}")
        self.inits.extend(m.format(m=name) for m in more)
        return name

    def param(self, shape: list) -> str:
        name = self._attr("p")
        self.inits.append(f"{name} = nn.Parameter(torch.randn({', '.join(map(str, shape)) or '()'}) * 0.5)")
        return name

    def const(self, values, shape: list | None = None, dtype: str = "torch.long") -> str:
        name = self._attr("c")
        shaped = f".reshape({', '.join(map(str, shape))})" if shape else ""
        self.inits.append(f"self.register_buffer('{name[5:]}', torch.tensor({values}, dtype={dtype}){shaped})")
        return name

    def floats(self, pred=lambda t: True) -> list[T]:
        return [t for t in self.live if t.kind == "f" and len(t.shape) >= 1 and pred(t)]

    def pick(self, r: random.Random, pred=lambda t: True) -> T | None:
        """A float tensor that ``pred`` accepts: mostly the newest one."""
        c = self.floats(pred)
        if not c:
            return None
        return c[-1] if r.random() < 0.7 else r.choice(c)

    def use(self, t: T) -> str:
        self.read.add(t.var)
        return t.var

    # --- the source -----------------------------------------------------------------------------------------
    def finish(self, spec: Spec) -> Generated:
        leaves = [t.var for t in self.live if t.kind == "f" and t.var.startswith("v") and t.var not in self.read]
        outs = list(dict.fromkeys(self.outputs + leaves))
        for t, _ in self.inputs:  # see the module docstring: every input is read
            if t.var not in self.read:
                u = self.new(f"{t.var} * 2" + (".0" if t.kind == "f" else ""), t.shape, f"unused {t.var} * 2", t.kind)
                outs.append(u.var)
        names = ", ".join(t.var for t, _ in self.inputs)
        ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
        desc = "; ".join(self.desc)
        body = ["import torch", "from torch import nn", "", "",
                "class Fuzz(nn.Module):", f'    """fuzz seed {spec.seed}: {desc}"""', "",
                "    def __init__(self):", "        super().__init__()"]
        body += [f"        {ln}" for ln in self.inits]
        body += ["", f"    def forward(self, {names}):"] + [f"        {ln}" for ln in self.lines]
        body += [f"        return {ret}", "", "", "def model():",
                 f"    torch.manual_seed({spec.seed})", "    module = Fuzz().eval()",
                 f"    g = torch.Generator().manual_seed({spec.seed})",
                 f"    example = ({', '.join(ex for _, ex in self.inputs)},)"]
        if self.dynamic:
            dims = ", ".join("{0: dim}" if t.shape and t.shape[0] == SYM else "None" for t, _ in self.inputs)
            body += [f"    dim = torch.export.Dim('batch', min={SYM_MIN}, max={SYM_MAX})",
                     f"    return module, example, ({dims},)"]
        else:
            body.append("    return module, example")
        return Generated(spec, "\n".join(body) + "\n", desc, self.dynamic)
