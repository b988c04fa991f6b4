"""N-A2C: Neighbourhood Actor Advantage Critic (Zhang et al., "Compiler-Level Matrix Multiplication
Optimization for Deep Learning", section 4.3, Algorithm 2).

Same MDP as G-BFS (see gbfs.py; s0 from ``tiletune.strategies.starts``): states are configurations, actions move a
prime factor between two levels of one axis (or a choice knob one step), reward r(s, a) = 1 / cost(s')
(eq. 8).

Algorithm 2::

    init s0, memory M (fixed size), hashtable H_v, cost_min
    for each episode:
        while len(B_collect) < len(B_test):
            s = s0
            for T steps:
                if rand() < epsilon: a follows pi(s)        # the paper: with probability epsilon, the policy
                else:                a random action from A
                s' = step(s, a); if s' not in H_v: add s' to B_collect
                s = s'
        for s' in B_collect (measured):
            if cost(s') < cost_min: cost_min = cost(s'); s* = s'; s0 = s*
            H_v[s'] = cost(s')
            store (s, a, r(s, a), s') in M for every s, a with step(s, a) = s'
            train the actor and critic networks with M

One episode is one ``ask(n)``: len(B_test) = n, the loop's batch; its results come back in ``tell``.

Choices where the paper leaves a detail open (paper's notation):

- s0 itself is tested first (the first batch is [s0]), so H_v and cost_min start from it. The start
  (``tiletune.strategies.starts``; the paper's s0 is ``untiled``): with a constructive start the
  constructions are the first batch and the centre s0 moves to the best of them when their costs are told.
- Actions are drawn from the legitimate ones at s, A(s) = {a in A : J(step(s, a)) = 1}: the random
  branch is uniform over A(s) and pi(s) is the actor's softmax renormalised over A(s) (option
  greedy=true takes its argmax instead of sampling). A walk stops early at a state with A(s) empty.
- B_collect holds distinct states not in H_v; a state already collected in this episode is walked
  through but not collected twice.
- Guard against an endless while-loop: when ``max_walks`` consecutive walks from s0 collect nothing new
  (the T-step neighbourhood of s0 is all visited), the rest of the batch is filled with unvisited states
  drawn uniformly from the space; when the whole space is visited, ``ask`` returns [].
- "every s, a with step(s, a) = s'" (line 25) is taken literally by default (predecessors=all): the
  actions are invertible, so the predecessors of s' are its neighbours s = step(s', a^-1), each stored
  with the action a that leads from s to s'. predecessors=walked stores only the transitions walked in
  the episode.
- Reward: r = 1/cost(s') (0 for a failed measurement). For training, rewards are divided by the largest
  reward in M (a positive rescaling into [0, 1] so one learning rate fits any workload).
- A2C update on minibatches drawn from M: advantage A = r + gamma V(s') - V(s); critic loss A^2; actor
  loss -log pi(a|s) A (A detached) - entropy_coef * H(pi(s)); log pi over the whole action set A.
  ``train_steps`` Adam steps after each tell (incremental training, line 26 once per batch).
- Networks: small MLPs (``hidden`` units, two hidden layers, tanh) on ``Space.encode(s)``; the actor has
  one output per action of ``Space.actions``. Determinism: weights are initialised from a
  torch.Generator seeded by the strategy seed, every random choice uses the numpy generator, and
  training runs with one torch thread.
- T (exploration steps) is fixed by default; T_mode=decay lowers it by one every T_every episodes down
  to T_min ("starting with a large value and gradually reducing"); T_mode=grow raises it by one for
  every T_every consecutive episodes without improvement, up to T_max ("increase to explore new
  configuration neighborhoods"), and resets it to T when the centre improves.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Sequence

import numpy as np

from ..space import Action, Config, Space, SplitKnob
from .base import Strategy, Trial, register
from .options import DISCOUNT, GREATER_THAN_ZERO, NONNEGATIVE, POSITIVE, PROBABILITY, Option
from .sampling import sample_unvisited
from .starts import start_options, strategy_starts
from .torch_support import require_torch


def inverse_actions(space: Space) -> list[int]:
    """For every action index, the index of the action that undoes it."""
    pos = {a: i for i, a in enumerate(space.actions)}
    inv = []
    for a in space.actions:
        k = space.knobs[a.knob]
        if isinstance(k, SplitKnob):
            inv.append(pos[Action(a.knob, a.shrink, a.grow, a.p)])
        else:
            inv.append(pos[Action(a.knob, -a.grow, a.shrink, a.p)])
    return inv


class _Nets:
    """Actor pi(a|s) and critic V(s): small MLPs, Adam, CPU."""

    def __init__(self, n_in: int, n_actions: int, hidden: int, lr: float, seed: int):
        torch, nn = require_torch()
        self.torch = torch
        gen = torch.Generator().manual_seed(int(seed))

        def mlp(n_out: int):
            net = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                nn.Linear(hidden, n_out))
            for m in net:
                if isinstance(m, nn.Linear):
                    bound = 1.0 / math.sqrt(m.in_features)
                    with torch.no_grad():
                        m.weight.uniform_(-bound, bound, generator=gen)
                        m.bias.uniform_(-bound, bound, generator=gen)
            return net

        self.actor = mlp(n_actions)
        self.critic = mlp(1)
        self.opt = torch.optim.Adam(list(self.actor.parameters()) + list(self.critic.parameters()), lr=lr)

    def logits(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                return self.actor(torch.from_numpy(x[None, :])).numpy()[0].astype(np.float64)
        finally:
            torch.set_num_threads(threads)

    def train(self, s, a, r, s2, gamma: float, entropy_coef: float, steps: int, batch: int,
              rng: np.random.Generator) -> float:
        torch = self.torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        loss_v = 0.0
        try:
            S, A, R, S2 = (torch.from_numpy(s), torch.from_numpy(a), torch.from_numpy(r), torch.from_numpy(s2))
            for _ in range(steps):
                idx = torch.from_numpy(rng.integers(0, len(A), size=min(batch, len(A))))
                s_b, a_b, r_b, s2_b = S[idx], A[idx], R[idx], S2[idx]
                v = self.critic(s_b).squeeze(1)
                with torch.no_grad():
                    target = r_b + gamma * self.critic(s2_b).squeeze(1)
                adv = target - v
                logp = torch.log_softmax(self.actor(s_b), dim=1)
                entropy = -(logp.exp() * logp).sum(1).mean()
                actor_loss = -(logp.gather(1, a_b[:, None]).squeeze(1) * adv.detach()).mean()
                critic_loss = adv.pow(2).mean()
                loss = actor_loss + critic_loss - entropy_coef * entropy
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                loss_v = float(loss.detach())
        finally:
            torch.set_num_threads(threads)
        return loss_v


@register
class NA2C(Strategy):
    name = "na2c"
    summary = "Neighbourhood Actor Advantage Critic: T-step episodes around the best state (Zhang et al., Alg. 2)"
    options = (
        Option("T", 3, "exploration steps per walk from the centre s0", int, **POSITIVE),
        Option("T_mode", "fixed", "fixed T, or 'decay' (T -> T_min) or 'grow' (T -> T_max while not improving)",
               str, choices=("fixed", "decay", "grow")),
        Option("T_min", 1, "smallest T for T_mode=decay", int, **POSITIVE),
        Option("T_max", 10, "largest T for T_mode=grow", int, **POSITIVE),
        Option("T_every", 4, "episodes per change of T (decay), or episodes without improvement per step (grow)",
               int, **POSITIVE),
        Option("epsilon", 0.8, "probability of following the actor's policy pi(s) (else a random action)", float,
               **PROBABILITY),
        Option("greedy", False, "follow argmax pi(s) instead of sampling pi(s)", bool),
        Option("memory", 2000, "size of the memory M of (s, a, r, s') transitions", int, **POSITIVE),
        Option("predecessors", "all", "store every (s, a) with step(s, a) = s' ('all') or only walked ones",
               str, choices=("all", "walked")),
        Option("gamma", 0.9, "discount of the critic's target r + gamma V(s')", float, **DISCOUNT),
        Option("lr", 1e-3, "Adam learning rate of actor and critic", float, **GREATER_THAN_ZERO),
        Option("hidden", 64, "hidden units per layer of the MLPs", int, **POSITIVE),
        Option("train_steps", 16, "minibatch updates after each measured batch", int, **NONNEGATIVE),
        Option("minibatch", 64, "transitions per update", int, **POSITIVE),
        Option("entropy", 0.01, "entropy bonus of the actor loss", float, **NONNEGATIVE),
        Option("max_walks", 64, "walks in a row that collect nothing new before falling back to random "
               "unvisited states", int, **POSITIVE),
    ) + start_options("the paper: untiled")

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        self.actions = space.actions
        self.inverse = inverse_actions(space)
        self.starts = strategy_starts(self, paper="untiled")  # tested first
        self.s0 = self.starts[0]  # the centre of exploration
        self.H_v: dict[Config, float] = {}  # visited states and their costs
        self.M: deque = deque(maxlen=o["memory"])  # (enc(s), a, r, enc(s'))
        self.s_star: Config | None = None
        self.cost_min = math.inf
        self.episode = 0
        self.since_improvement = 0
        self.T = o["T"]
        self.pending: set[Config] = set()
        self.walked: list[tuple[Config, int, Config]] = []  # transitions of the current episode
        self.fallbacks = 0  # states drawn at random by the loop guard (for inspection)
        self.nets = _Nets(space.encoding_size, len(self.actions), o["hidden"], o["lr"], self.seed)

    # ---- the episode: walks of T steps from s0 -------------------------------------------------
    def _legal(self, s: Config) -> list[tuple[int, Config]]:
        out = []
        for i, a in enumerate(self.actions):
            s2 = self.space.step(s, a)
            if s2 is not None:
                out.append((i, s2))
        return out

    def _choose(self, s: Config, legal: list[tuple[int, Config]]) -> tuple[int, Config]:
        if self.rng.random() < self.opts["epsilon"]:  # a follows pi(s)
            logits = self.nets.logits(self.space.encode(s))[[i for i, _ in legal]]
            if self.opts["greedy"]:
                return legal[int(np.argmax(logits))]
            p = np.exp(logits - logits.max())
            return legal[int(self.rng.choice(len(legal), p=p / p.sum()))]
        return legal[int(self.rng.integers(len(legal)))]  # a random action

    def _current_T(self) -> int:
        o = self.opts
        if o["T_mode"] == "decay":
            return max(o["T_min"], o["T"] - self.episode // o["T_every"])
        if o["T_mode"] == "grow":
            return min(max(o["T_max"], o["T"]), o["T"] + self.since_improvement // o["T_every"])
        return o["T"]

    def ask(self, n: int) -> list[Config]:
        if self.starts:  # test s0 (or the constructions) first
            first, self.starts = self.starts[:n], self.starts[n:]
            self.pending.update(first)
            return first
        self.T = self._current_T()
        self.walked = []
        collect: list[Config] = []
        seen = set()
        idle_walks = 0
        while len(collect) < n:
            s, new = self.s0, False
            for _ in range(self.T):
                legal = self._legal(s)
                if not legal:
                    break
                a, s2 = self._choose(s, legal)
                self.walked.append((s, a, s2))
                if s2 not in self.H_v and s2 not in self.pending and s2 not in seen:
                    seen.add(s2)
                    collect.append(s2)
                    new = True
                    if len(collect) >= n:
                        break
                s = s2
            idle_walks = 0 if new else idle_walks + 1
            if idle_walks >= self.opts["max_walks"]:
                # guard: the T-step neighbourhood of s0 is visited; fill up with random unvisited states
                extra = sample_unvisited(self.space, self.rng, n - len(collect),
                                         set(self.H_v) | self.pending | seen)
                self.fallbacks += len(extra)
                collect += extra
                break
        self.episode += 1
        self.pending.update(collect)
        return collect

    # ---- measured: update H_v, the centre, the memory, and train ------------------------------
    def tell(self, trials: Sequence[Trial]) -> None:
        improved = False
        enc = self.space.encode
        for t in trials:
            s2 = t.config
            cost = t.cost if t.ok else math.inf
            self.pending.discard(s2)
            if cost < self.cost_min:
                self.cost_min, self.s_star = cost, s2
                self.s0 = s2  # the centre moves to the best state
                improved = True
            if s2 in self.H_v:
                continue
            self.H_v[s2] = cost
            r = 0.0 if not math.isfinite(cost) or cost <= 0 else 1.0 / cost
            e2 = enc(s2)
            if self.opts["predecessors"] == "all":
                for i, a in enumerate(self.actions):
                    s = self.space.step(s2, a)  # s = step(s', a^-1) and step(s, a^-1 ^-1) = s'
                    if s is not None:
                        self.M.append((enc(s), self.inverse[i], r, e2))
            else:
                for s, a, nxt in self.walked:
                    if nxt == s2:
                        self.M.append((enc(s), a, r, e2))
        self.since_improvement = 0 if improved else self.since_improvement + 1
        self._train()

    def _train(self) -> None:
        if not self.M or self.opts["train_steps"] == 0:
            return
        s = np.stack([m[0] for m in self.M]).astype(np.float32)
        a = np.asarray([m[1] for m in self.M], dtype=np.int64)
        r = np.asarray([m[2] for m in self.M], dtype=np.float64)
        s2 = np.stack([m[3] for m in self.M]).astype(np.float32)
        top = r.max()
        if top <= 0:
            return  # nothing but failures so far: no signal
        r = (r / top).astype(np.float32)
        self.nets.train(s, a, r, s2, self.opts["gamma"], self.opts["entropy"], self.opts["train_steps"],
                        self.opts["minibatch"], self.rng)
