"""AutoTVM's ``itervar`` features, read from the lowered loop nest of a scheduled configuration.

This module is the TVM side of feature extraction (it runs in the feature worker processes; the strategy
never imports it directly). For one configuration:

1. ``lower(workload, space, config, target)``: the CPU schedule (``tiletune.schedules``) is applied and
   its IRModule lowered with the TensorIR passes that make the loop program explicit (LowerInitBlock,
   PlanAndUpdateBufferAllocationLocation, ConvertBlocksToOpaque, CompactBufferAllocation,
   LowerOpaqueBlock, FlattenBuffer, StmtSimplify). The result is what AutoTVM analysed: For loops
   with their kind (serial / parallel / vectorized / unrolled / thread binding), the compacted local
   accumulator, one flattened index per buffer access. Loops of extent 1 disappear in this lowering,
   as they did in AutoTVM's.
2. ``touch_analysis(func)``: AutoTVM's TouchExtractor (src/autotvm/touch_extractor.cc), re-implemented
   over ``tvm.tirx`` statements. For every loop variable v it records the loop length, nest level,
   top-down product (product of the lengths of v and the loops around it), bottom-up product (largest
   count x reuse below v), the annotation, the float add/mul/div count of the loop body, and for every
   buffer access b inside v (each access is its own "buffer" ``name_i``, i = access counter):
     stride  -- the multiplier of v in b's flattened index (AutoTVM's IndexParser: c for ``v*c``, 1 when
                v appears otherwise, 0 when it does not appear),
     count   -- touch count: product of the lengths of the loops at or inside v whose variable appears
                in b's index (distinct elements touched below v),
     reuse   -- reuse ratio: product of the lengths of the loops at or inside v that do not index b,
     thread_count / thread_reuse -- count and reuse relative to the serial loops right under a parallel
                loop (AutoTVM's "base pushed to the upper parallel level").
   AutoTVM's ``mod`` entry is dropped: its IndexParser never set it (always -1).
3. ``itervar_vector``: the flattened vector, every number through AutoTVM's ``trans`` (log2(x+1),
   -log2(1-x) for negative x), plus the choice-knob values (AutoTVM appended ``get_other_option()``;
   here log2(1+value)).

Fixed length (AutoTVM padded vectors of different lengths with zeros, so position i meant different
loops for different configurations): the layout is fixed per workload and template by the loops of
the *unlowered* schedule (every split level is a loop there, also of extent 1), each keyed
``name@buffer`` by its variable name and the first buffer stored under it (blocks reuse names such as
``ax0``), and by the buffer accesses of the program; both are collected over a few reference
configurations that together show every stage (one per value of each choice knob, e.g. pack=1 adds a
packing stage). Slot j holds the loop ``loops[j]`` (all zeros when lowering removed it or the
configuration has no such stage); inside a slot, one group of 5 numbers per access in ``accesses``
(zeros where the loop does not enclose that access). Length = L (12 + 5 B) + number of choice knobs,
with L loop slots and B accesses: GEMM 64^3 with (4, 2) levels and the unroll/pack knobs: L = 17,
B = 9 -> 971; conv2d: L = 31, B = 7 -> 1458. Two shapes of the same operator (same levels) have the
same layout, so itervar features transfer across shapes of one operator, not across operator kinds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..schedules import schedule
from ..schedules.cpu import InvalidConfig, check
from ..space import ChoiceKnob, Config, Space
from ..workloads.base import Workload

# annotation one-hot order
ANNOTATIONS = ("serial", "parallel", "vectorized", "unrolled", "thread")
LOOP_FIELDS = 4 + len(ANNOTATIONS) + 3  # length, nest, topdown, bottomup, one-hot, add, mul, div
BUFFER_FIELDS = 5  # stride, count, reuse, thread_count, thread_reuse


def trans(x: float) -> float:
    """AutoTVM's take_log transform."""
    if x < 0:
        return -math.log2(-x + 1)
    return math.log2(x + 1)


@dataclass
class Touch:
    stride: int = 0
    count: int = 1
    reuse: int = 1
    thread_count: int = 0
    thread_reuse: int = 0


@dataclass
class LoopInfo:
    name: str
    length: int
    nest_level: int
    ann: str
    topdown: int
    order: int
    bottomup: int = -1
    store: str | None = None  # first buffer stored under the loop
    add: int = 0
    mul: int = 0
    div: int = 0
    touch: dict[str, Touch] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.store}"


def _para_level(ann: str) -> int:
    return 1 if ann in ("parallel", "thread") else 0


def lower(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None):
    """The lowered PrimFunc of ``config`` (raises the schedule's InvalidConfig for rejected configs)."""
    import tvm
    from tvm import s_tir, tirx

    sch = schedule(workload, space, config, target or {"kind": "llvm"})
    seq = tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),  # a tensorized block's operand views (the int8 template's vpdpbusd)
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.StmtSimplify(),
    ])
    return seq(sch.mod)["main"], sch


def loop_names(sch) -> list[str]:
    """Loop keys of the unlowered schedule (every split level is a loop there, also of extent 1), in
    program (pre-)order. A key is ``name@buffer``: the loop variable's name and the first buffer stored
    under it, since blocks reuse loop names (``ax0`` of a write-back and of a packing stage)."""
    from tvm import s_tir, tirx

    order: list = []

    def walk(node):
        """Visit; return the first buffer written in the subtree."""
        if node is None:
            return None
        if isinstance(node, tirx.For):
            i = len(order)
            order.append(None)
            store = walk(node.body)
            order[i] = f"{node.loop_var.name}@{store}"
            return store
        if isinstance(node, tirx.SeqStmt):
            first = None
            for x in node.seq:
                st = walk(x)
                first = first or st
            return first
        if isinstance(node, s_tir.SBlockRealize):
            return walk(node.block)
        if isinstance(node, s_tir.SBlock):
            a = walk(node.init)
            b = walk(node.body)
            own = _name(node.writes[0].source) if len(node.writes) else None
            return own or a or b
        if isinstance(node, tirx.IfThenElse):
            a = walk(node.then_case)
            b = walk(node.else_case)
            return a or b
        if hasattr(node, "body"):
            return walk(node.body)
        return None

    walk(sch.mod["main"].body)
    return list(dict.fromkeys(order))


def _nodes():
    """The tirx node classes this module matches (they moved between modules in TVM 0.27)."""
    import tvm
    from tvm import tirx
    from tvm.tirx import expr as E

    return SimpleNamespace(
        For=tirx.For, SeqStmt=tirx.SeqStmt, BufferStore=tirx.BufferStore, IfThenElse=tirx.IfThenElse,
        Evaluate=tirx.Evaluate, LetStmt=tirx.LetStmt, BufferLoad=tvm.ir.TensorLoad, Var=E.Var, IntImm=E.IntImm,
        FloatImm=E.FloatImm, Add=E.Add, Sub=E.Sub, Mul=E.Mul, Div=E.Div, FloorDiv=E.FloorDiv,
    )


def _name(x) -> str:
    n = getattr(x, "name", None) or getattr(x, "name_hint", None)
    return str(n) if n is not None else str(x)


def _is_call(e) -> bool:
    return hasattr(e, "op") and hasattr(e, "args")


class _Extractor:
    """AutoTVM's TouchExtractor over a lowered tirx PrimFunc body."""

    def __init__(self):
        self.t = _nodes()
        self.loops: list[LoopInfo] = []
        self.stack: list[LoopInfo] = []
        self.topdown = 1
        self.counter = 0
        self.buffer_counter: dict[str, int] = {}
        self.accesses: list[str] = []

    # ---- statements ------------------------------------------------------------------------------
    def stmt(self, s) -> None:
        t = self.t
        if s is None:
            return
        if isinstance(s, t.For):
            ext = s.extent
            length = int(ext.value) if isinstance(ext, t.IntImm) else -1
            kind = int(s.kind)
            ann = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}.get(kind, "serial")
            self._enter(s.loop_var.name, length, ann)
            self.stmt(s.body)
            self._exit()
        elif isinstance(s, t.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, t.BufferStore):
            self._mem(_name(s.buffer), s.indices, store=True)
            self.expr(s.value)
            for i in s.indices:
                self.expr(i, index=True)
        elif isinstance(s, t.IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            self.stmt(s.else_case)
        elif isinstance(s, t.Evaluate):
            self.expr(s.value)
        elif isinstance(s, t.LetStmt):
            self.expr(s.value)
            self.stmt(s.body)
        elif hasattr(s, "body"):
            self.stmt(s.body)

    # ---- expressions -----------------------------------------------------------------------------
    def expr(self, e, index: bool = False) -> None:
        t = self.t
        if e is None or isinstance(e, (t.Var, t.IntImm, t.FloatImm)):
            return
        if isinstance(e, t.BufferLoad):
            self._mem(_name(e.source), e.indices)
            for i in e.indices:
                self.expr(i, index=True)
            return
        if not index and self.stack and "float" in str(getattr(e, "ty", "")):
            top = self.stack[-1]
            if isinstance(e, (t.Add, t.Sub)):
                top.add += 1
            elif isinstance(e, t.Mul):
                top.mul += 1
            elif isinstance(e, (t.Div, t.FloorDiv)):
                top.div += 1
        if _is_call(e):
            for a in e.args:
                self.expr(a, index)
            return
        for attr in ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body"):
            if hasattr(e, attr):
                self.expr(getattr(e, attr), index)

    # ---- AutoTVM's EnterItervar_ / ExitItervar_ / EnterMem_ --------------------------------------
    def _enter(self, name: str, length: int, ann: str) -> None:
        self.topdown *= max(length, 1)
        info = LoopInfo(name, length, len(self.stack) + 1, ann, self.topdown, self.counter)
        self.counter += 1
        self.stack.append(info)
        self.loops.append(info)

    def _exit(self) -> None:
        var = self.stack[-1]
        L = max(var.length, 1)
        for buf, tp in var.touch.items():
            for sv in self.stack:
                p = sv.touch[buf]
                if tp.stride != 0:
                    p.count *= L
                else:
                    p.reuse *= L
        self.stack.pop()
        self.topdown //= L
        var.bottomup = max((tp.count * tp.reuse for tp in var.touch.values()), default=-1)
        para = _para_level(var.ann)
        if self.stack and _para_level(self.stack[-1].ann) == para + 1:
            for buf, tp in var.touch.items():
                for sv in self.stack:
                    if _para_level(sv.ann) == para + 1:
                        p = sv.touch[buf]
                        p.thread_reuse = -tp.reuse
                        p.thread_count = -tp.count
        for tp in var.touch.values():
            if tp.thread_count < 0:
                tp.thread_count = tp.count // (-tp.thread_count)
                tp.thread_reuse = tp.reuse // (-tp.thread_reuse)

    def _mem(self, buffer: str, indices, store: bool = False) -> None:
        if store:
            for sv in self.stack:
                if sv.store is None:
                    sv.store = buffer
        k = self.buffer_counter.get(buffer, 0)
        self.buffer_counter[buffer] = k + 1
        name = f"{buffer}_{k}"
        self.accesses.append(name)
        strides: dict[str, int] = {}
        for i in indices:
            self._parse_index(i, strides)
        for sv in self.stack:
            sv.touch[name] = Touch(stride=strides.get(sv.name, 0))

    def _parse_index(self, e, strides: dict[str, int]) -> None:
        """AutoTVM's IndexParser: stride c for ``v * c``, 1 for any other first occurrence of v."""
        t = self.t
        if isinstance(e, t.Var):
            strides.setdefault(e.name, 1)
            return
        if isinstance(e, t.Mul):
            if isinstance(e.a, t.Var) and isinstance(e.b, t.IntImm):
                strides.setdefault(e.a.name, int(e.b.value))
                return
            if isinstance(e.b, t.Var) and isinstance(e.a, t.IntImm):
                strides.setdefault(e.b.name, int(e.a.value))
                return
        if isinstance(e, t.BufferLoad):
            for i in e.indices:
                self._parse_index(i, strides)
            return
        if _is_call(e):
            for a in e.args:
                self._parse_index(a, strides)
            return
        for attr in ("a", "b", "value", "base", "stride"):
            if hasattr(e, attr):
                self._parse_index(getattr(e, attr), strides)


@dataclass
class Analysis:
    """The touch analysis of one lowered configuration."""

    loops: list[LoopInfo]  # in order of first occurrence
    accesses: list[str]


def touch_analysis(func) -> Analysis:
    ex = _Extractor()
    ex.stmt(func.body)
    loops = sorted(ex.loops, key=lambda x: x.order)
    return Analysis(loops, ex.accesses)


@dataclass(frozen=True)
class Layout:
    """The fixed itervar layout of one workload + template: loop slots and access slots."""

    loops: tuple[str, ...]
    accesses: tuple[str, ...]
    choices: int

    @property
    def dim(self) -> int:
        return len(self.loops) * (LOOP_FIELDS + BUFFER_FIELDS * len(self.accesses)) + self.choices


def choice_values(space: Space, config: Config) -> list[float]:
    return [math.log2(1 + float(v)) if isinstance(v, (int, float)) else float(k.index(v))
            for k, v in zip(space.knobs, config.values) if isinstance(k, ChoiceKnob)]


def reference_configs(space: Space, workload: Workload) -> list[Config]:
    """Configurations the template accepts that together show every loop and access of the template:
    an accepted base configuration (the untiled one first) and its variants with each value of each
    choice knob (e.g. pack=1 adds a packing stage)."""
    def ok(c: Config) -> bool:
        try:
            check(workload, space, c)
        except InvalidConfig:
            return False
        return space.is_legal(c)

    cands = [space.untiled()] + [space.get(i) for i in range(0, space.size, max(1, space.size // 50))]
    base = next((c for c in cands if ok(c)), space.untiled())
    out = [base]
    for ki, k in enumerate(space.knobs):
        if isinstance(k, ChoiceKnob):
            for v in k.values:
                vals = list(base.values)
                vals[ki] = v
                c = Config(tuple(vals))
                if c not in out and ok(c):
                    out.append(c)
    return out


def layout(workload: Workload, space: Space, target: dict | None) -> Layout:
    """The union of the loops (in order of first appearance) and accesses of the reference configs."""
    names: dict[str, None] = {}
    acc: dict[str, None] = {}
    for ref in reference_configs(space, workload):
        func, sch = lower(workload, space, ref, target)
        names.update(dict.fromkeys(loop_names(sch)))
        acc.update(dict.fromkeys(touch_analysis(func).accesses))
    n_choice = sum(isinstance(k, ChoiceKnob) for k in space.knobs)
    return Layout(tuple(names), tuple(acc), n_choice)


def itervar_vector(an: Analysis, lay: Layout, space: Space, config: Config) -> np.ndarray:
    per_loop = LOOP_FIELDS + BUFFER_FIELDS * len(lay.accesses)
    out = np.zeros(lay.dim, dtype=np.float32)
    slot = {n: i for i, n in enumerate(lay.loops)}
    acc_slot = {n: i for i, n in enumerate(lay.accesses)}
    for lp in an.loops:
        j = slot.get(lp.key)
        if j is None:
            continue
        base = j * per_loop
        row = [trans(lp.length), lp.nest_level, trans(lp.topdown), trans(lp.bottomup)]
        row += [1.0 if lp.ann == a else 0.0 for a in ANNOTATIONS]
        row += [trans(lp.add), trans(lp.mul), trans(lp.div)]
        out[base:base + LOOP_FIELDS] = row
        for buf, tp in lp.touch.items():
            b = acc_slot.get(buf)
            if b is None:
                continue
            o = base + LOOP_FIELDS + BUFFER_FIELDS * b
            out[o:o + BUFFER_FIELDS] = [trans(tp.stride), trans(tp.count), trans(tp.reuse),
                                        trans(tp.thread_count), trans(tp.thread_reuse)]
    ch = choice_values(space, config)
    if ch:
        out[-len(ch):] = ch
    return out
