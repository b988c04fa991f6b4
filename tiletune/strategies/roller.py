"""Roller-style tree construction (Zhu et al., OSDI'22), the baseline of the Gensor paper, as a strategy.

The construction (hardware-aligned rTiles per memory level, scaled up greedily by data reuse, several
rPrograms kept, the leaves ranked by Gensor's analytic model) is ``tiletune.construct.roller.RollerTree``;
the local searches share it through their ``start=roller`` option. This strategy measures only the top
``k`` leaves (Roller measures its top 10 by default; the tree often has fewer distinct leaves than that).
After the top-k, ``after_topk=continue`` proposes the remaining leaves in rank order, then returns [];
``after_topk=stop`` returns [] at once.
A row reduction (a space of choice knobs only) gets its template's own starts as its ranked leaves
(``tiletune.schedules.starts``, as ``model build --construct roller`` does; docs/decisions/row-reductions.md).
"""
from __future__ import annotations

from typing import Sequence

from ..analytic.etir import Model
from ..analytic.mma import MmaModel
from ..analytic.wgmma import WgmmaModel
from ..construct import row_starts
from ..construct.mma import MmaRollerTree
from ..construct.wgmma import WgmmaRollerTree
from ..construct.roller import BRANCH, RollerTree
from ..schedules import cuda_mma, cuda_wgmma
from ..space import Config, Space
from .base import Strategy, Trial, register
from .options import Option, after_topk_option, between, topk_option


@register
class Roller(Strategy):
    name = "roller"
    summary = "Roller-style construction: hardware-aligned rTiles scaled up greedily by data reuse, top-k measured"
    constructive = True
    options = (
        topk_option(10),
        Option("branch", BRANCH, "enlargements kept per scale-up step besides the greedy path", int,
               **between(1, 4)),
        after_topk_option("the remaining constructed leaves"),
    )

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        ctx = self.context
        if cuda_wgmma.owns(space):  # Hopper: rTiles over the wgmma template's knobs (tiletune.construct.wgmma)
            self.model = WgmmaModel(space, ctx.workload, ctx.hardware, ctx.target)
            self.tree = WgmmaRollerTree(space, self.model, branch=self.opts["branch"])
        elif cuda_mma.owns(space):  # tensor cores: rTiles over the template's knobs (tiletune.construct.mma)
            self.model = MmaModel(space, ctx.workload, ctx.hardware, ctx.target)
            self.tree = MmaRollerTree(space, self.model, branch=self.opts["branch"])
        elif (rows := row_starts(space, ctx.workload, ctx.target)) is not None:  # a row reduction: its starts
            self.model, self.tree, self._rows = None, None, rows
        else:
            self.model = Model(space, ctx.workload, ctx.hardware, ctx.target)
            self.tree = RollerTree(space, self.model, branch=self.opts["branch"])
        self._served = 0
        self._proposed: set[Config] = set()

    # ---- ask / tell ------------------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        ranked = self.construct()
        k = self.opts["k"]
        if self._served >= k and self.opts["after_topk"] == "stop":
            return []
        want = min(n, k - self._served) if self._served < k else n
        out = []
        for _, c in ranked:
            if len(out) >= want:
                break
            if c not in self._proposed:
                self._proposed.add(c)
                out.append(c)
        self._served += len(out)
        return out

    def construct(self) -> list[tuple[float, Config]]:
        """All leaves of the construction tree, ranked by the analytic model (best first); a row reduction's
        template starts."""
        return self._rows if self.tree is None else self.tree.construct()

    def tell(self, trials: Sequence[Trial]) -> None:
        pass  # construction only; the loop records the measurements

    def exhausted_reason(self) -> str:
        k, n = self.opts["k"], len(self._proposed)
        if self.opts["after_topk"] == "stop" and n >= k:
            return f"roller measured its top {k} constructed configuration(s) and stops there (after_topk=stop)"
        if self.tree is None:
            return f"roller measured all {n} of this row reduction's template starts"
        return f"roller's construction tree has only {n} distinct leaves for this space, all of them proposed"
