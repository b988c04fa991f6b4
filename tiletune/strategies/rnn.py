"""RNN controller baseline: a recurrent controller trained with REINFORCE (Zoph & Le, "Neural Architecture
Search with Reinforcement Learning", 2016), the "RNN controller" tuner that Zhang et al. compare G-BFS and
N-A2C against.

The controller emits a configuration knob by knob::

    h = cell(x_0, h_init); for knob k = 1..K:
        p_k = softmax(W_k h)                     # over knob k's options (SplitKnob.options / ChoiceKnob.values)
        c_k ~ p_k;  h = cell(embed_k(c_k), h)    # the choice is fed back as the next input

A batch of configurations is sampled, measured, and the controller parameters theta are updated with
the REINFORCE gradient with a moving-average baseline b::

    grad J = mean_i (R_i - b) grad log P(c_i; theta),   b <- beta b + (1 - beta) mean_i R_i

Choices where the baseline's description leaves details open:

- Reward R = 1 / cost (0 for a failed measurement), multiplied by the lowest cost seen so far so that it
  lies in (0, 1] (a positive rescaling: the best configuration so far gets R = 1), so one learning rate
  fits any workload. The baseline starts at the first batch's mean reward.
- One Adam step per told batch (``updates`` raises it), plus an entropy bonus (``entropy``) that keeps the
  softmaxes from collapsing early.
- Cell: LSTM (default) or GRU, ``hidden`` units; every knob has its own embedding and softmax head.
- Duplicates: configurations already proposed are not proposed again. A batch is filled by sampling
  up to ``tries`` times its size from the controller; whatever is still missing is drawn uniformly from
  the unvisited configurations (so a collapsed controller cannot stall the search).
- Determinism: weights come from a torch.Generator seeded by the strategy seed, sampling uses the
  strategy's numpy generator, and torch runs with one thread inside the strategy.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..space import Config, Space
from .base import Strategy, Trial, register
from .options import DISCOUNT, GREATER_THAN_ZERO, NONNEGATIVE, POSITIVE, Option
from .sampling import sample_unvisited
from .torch_support import require_torch


class _Controller:
    def __init__(self, sizes: list[int], hidden: int, cell: str, lr: float, seed: int):
        torch, nn = require_torch()
        self.torch = torch
        self.sizes = sizes
        self.hidden = hidden
        self.kind = cell
        gen = torch.Generator().manual_seed(int(seed))
        self.start = nn.Parameter(torch.zeros(1, hidden))
        self.embed = nn.ModuleList([nn.Embedding(k, hidden) for k in sizes])
        self.cell = nn.LSTMCell(hidden, hidden) if cell == "lstm" else nn.GRUCell(hidden, hidden)
        self.heads = nn.ModuleList([nn.Linear(hidden, k) for k in sizes])
        params = [self.start] + list(self.embed.parameters()) + list(self.cell.parameters()) + list(
            self.heads.parameters())
        with torch.no_grad():
            bound = 1.0 / math.sqrt(hidden)
            for p in params:
                if p is not self.start:
                    p.uniform_(-bound, bound, generator=gen)
        self.params = params
        self.opt = torch.optim.Adam(params, lr=lr)

    def _step(self, x, state):
        if self.kind == "lstm":
            h, c = self.cell(x, state)
            return h, (h, c)
        h = self.cell(x, state)
        return h, h

    def _init(self, batch: int):
        torch = self.torch
        x = self.start.expand(batch, self.hidden)
        z = torch.zeros(batch, self.hidden)
        return x, ((z, z) if self.kind == "lstm" else z)

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """Option indices [batch, K] sampled from the controller."""
        torch = self.torch
        out = np.zeros((batch, len(self.sizes)), dtype=np.int64)
        with torch.no_grad():
            x, state = self._init(batch)
            for k, head in enumerate(self.heads):
                h, state = self._step(x, state)
                p = torch.softmax(head(h).double(), dim=1).numpy()
                cdf = np.cumsum(p, axis=1)
                u = rng.random(batch)[:, None] * cdf[:, -1:]
                idx = np.minimum((cdf < u).sum(axis=1), self.sizes[k] - 1)
                out[:, k] = idx
                x = self.embed[k](torch.from_numpy(idx))
        return out

    def update(self, choices: np.ndarray, advantage: np.ndarray, entropy_coef: float) -> float:
        """One REINFORCE step: minimise -mean((R - b) log P(c)) - entropy_coef * H."""
        torch = self.torch
        C = torch.from_numpy(choices)
        adv = torch.from_numpy(advantage.astype(np.float32))
        x, state = self._init(len(choices))
        logp = torch.zeros(len(choices))
        entropy = torch.zeros(len(choices))
        for k, head in enumerate(self.heads):
            h, state = self._step(x, state)
            lp = torch.log_softmax(head(h), dim=1)
            logp = logp + lp.gather(1, C[:, k:k + 1]).squeeze(1)
            entropy = entropy - (lp.exp() * lp).sum(1)
            x = self.embed[k](C[:, k])
        loss = -(adv * logp).mean() - entropy_coef * entropy.mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return float(loss.detach())


@register
class RNNController(Strategy):
    name = "rnn"
    summary = "RNN controller (LSTM/GRU) emitting knobs one by one, trained with REINFORCE (baseline)"
    options = (
        Option("cell", "lstm", "recurrent cell", str, choices=("lstm", "gru")),
        Option("hidden", 64, "hidden units of the cell", int, **POSITIVE),
        Option("lr", 0.005, "Adam learning rate", float, **GREATER_THAN_ZERO),
        Option("baseline_decay", 0.9, "beta of the moving-average baseline b", float, **DISCOUNT),
        Option("entropy", 0.001, "entropy bonus", float, **NONNEGATIVE),
        Option("updates", 1, "REINFORCE steps per told batch", int, **POSITIVE),
        Option("tries", 8, "controller samples per wanted configuration before falling back to random "
               "unvisited ones", int, **POSITIVE),
    )

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        self.knobs = space.knobs
        self.controller = _Controller([len(k) for k in space.knobs], o["hidden"], o["cell"], o["lr"], self.seed)
        self.proposed: set[Config] = set()
        self.baseline: float | None = None
        self.cost_min = math.inf
        self.fallbacks = 0

    def _config(self, row: np.ndarray) -> Config:
        return Config(tuple(k.options[int(i)] for k, i in zip(self.knobs, row)))

    def _choices(self, c: Config) -> list[int]:
        return [k.index(v) for k, v in zip(self.knobs, c.values)]

    def _torch(self):
        torch = self.controller.torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        return torch, threads

    def ask(self, n: int) -> list[Config]:
        torch, threads = self._torch()
        out: list[Config] = []
        try:
            budget = self.opts["tries"] * n
            while len(out) < n and budget > 0:
                want = min(budget, 2 * (n - len(out)))
                budget -= want
                for row in self.controller.sample(want, self.rng):
                    c = self._config(row)
                    if c not in self.proposed and self.space.is_legal(c):
                        self.proposed.add(c)
                        out.append(c)
                        if len(out) == n:
                            break
        finally:
            torch.set_num_threads(threads)
        if len(out) < n:
            extra = sample_unvisited(self.space, self.rng, n - len(out), self.proposed)
            self.fallbacks += len(extra)
            self.proposed.update(extra)
            out += extra
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        if not trials:
            return
        for t in trials:
            if t.ok:
                self.cost_min = min(self.cost_min, t.cost)
        if not math.isfinite(self.cost_min):
            return  # no successful measurement yet: every reward is 0, no signal
        R = np.asarray([self.cost_min / t.cost if t.ok and t.cost > 0 else 0.0 for t in trials])
        if self.baseline is None:
            self.baseline = float(R.mean())
        adv = R - self.baseline
        choices = np.asarray([self._choices(t.config) for t in trials], dtype=np.int64)
        torch, threads = self._torch()
        try:
            for _ in range(self.opts["updates"]):
                self.controller.update(choices, adv, self.opts["entropy"])
        finally:
            torch.set_num_threads(threads)
        beta = self.opts["baseline_decay"]
        self.baseline = beta * self.baseline + (1 - beta) * float(R.mean())
