"""Figures of a benchmark run, as PNG files (matplotlib, Agg backend).

- ``curves_<workload>.png``: best GFLOPS so far against trials, against wall time, and against the
  fraction of the space explored (log scale), one line per strategy (mean over seeds, min-max band),
  with the vendor library and MetaSchedule as horizontal lines (MetaSchedule's own best-so-far curve,
  from its measurements, dashed in the trials and time panels) and the peak when it is within 2x of
  the best result.
- ``boxes.png``: box plots over seeds of the best GFLOPS at the full trial budget, one panel per
  workload, with the baselines as horizontal lines.
- ``overview.png``: per workload, the mean best GFLOPS of each strategy and of MetaSchedule divided by
  the vendor library's (1.0 = as fast as the vendor library).
"""
from __future__ import annotations

import math
import re
import textwrap
import warnings
from pathlib import Path

import numpy as np

from .results import BenchResult


def agg_pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", key.replace("dilation=1", "")).strip("_")[:80]


def short_label(key: str, width: int = 24) -> str:
    """A workload key for a tick label: defaults dropped, wrapped on commas."""
    op, _, body = key.partition(":")
    items = [x for x in body.split(",") if x not in ("dilation=1", "N=1", "pad=0", "stride=1")]
    lines = textwrap.wrap(", ".join(items), width, break_long_words=False)
    return op + "\n" + "\n".join(x.replace(", ", ",") for x in lines)


def _colors(names: list[str]) -> dict[str, str]:
    cycle = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]
    return {n: cycle[i % len(cycle)] for i, n in enumerate(names)}


def _step_mean(runs, xs_of, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best-so-far of each run sampled on ``grid`` (step function), then mean/min/max over runs."""
    ys = []
    for r in runs:
        x = np.asarray([xs_of(r, t) for t in r.trace], dtype=float)
        b = np.asarray([t[3] for t in r.trace], dtype=float)
        if len(x) == 0:
            ys.append(np.zeros_like(grid))
            continue
        idx = np.searchsorted(x, grid, side="right") - 1
        # nothing found before a run's first result (0); after a run ends its best stays
        y = np.where(idx >= 0, b[np.clip(idx, 0, len(b) - 1)], 0.0)
        ys.append(y)
    arr = np.vstack(ys)
    with np.errstate(all="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(arr, axis=0), np.nanmin(arr, axis=0), np.nanmax(arr, axis=0)


def _ms_curve(b) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(trial, seconds, best GFLOPS so far) of MetaSchedule's own measurements."""
    if b is None or not b.curve:
        return None
    return b.curve


def _baseline_lines(ax, res: BenchResult, key: str, best_seen: float) -> None:
    flops = res.flops[key]
    base = res.baseline_results.get(key, {})
    v = base.get("vendor")
    if v is not None and v.ok:
        ax.axhline(v.gflops(flops), color="k", ls="--", lw=1, label=f"vendor: {v.label[:28]}")
    m = base.get("metaschedule")
    if m is not None and m.ok:
        ax.axhline(m.gflops(flops), color="tab:gray", ls=":", lw=1.5, label="MetaSchedule (best, our timing)")
    if res.peak and res.peak.gflops <= 2 * max(best_seen, 1e-9):
        ax.axhline(res.peak.gflops, color="tab:red", ls="-.", lw=1, label="peak")


def plot_curves(res: BenchResult, key: str, path: Path) -> None:
    plt = agg_pyplot()
    colors = _colors(res.strategies)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    flops = res.flops[key]
    size = res.space_sizes.get(key) or 1
    best_seen = 0.0
    for s in res.strategies:
        runs = [r for r in res.runs_of(key, s) if r.trace]
        if not runs:
            continue
        best_seen = max(best_seen, max(r.best_gflops for r in runs))
        n_max = max(r.trace[-1][0] for r in runs)
        t_max = max(r.elapsed_s for r in runs)
        for ax, xs_of, grid in (
            (axes[0], lambda r, t: t[0], np.arange(1, n_max + 1, dtype=float)),
            (axes[1], lambda r, t: t[1], np.unique(np.concatenate([[0.0, t_max]] + [[t[1] for t in r.trace]
                                                                                for r in runs]))),
            (axes[2], lambda r, t: t[0] / size, np.arange(1, n_max + 1, dtype=float) / size),
        ):
            mean, lo, hi = _step_mean(runs, xs_of, grid)
            ax.step(grid, mean, where="post", color=colors[s], lw=1.8, label=f"{s} ({len(runs)} seeds)")
            if len(runs) > 1:
                ax.fill_between(grid, lo, hi, step="post", color=colors[s], alpha=0.15, lw=0)
    m = res.baseline_results.get(key, {}).get("metaschedule")
    if m is not None and m.curve:
        tr = np.asarray([c[0] for c in m.curve], dtype=float)
        ts = np.asarray([c[1] for c in m.curve], dtype=float)
        g = np.asarray([flops / c[2] / 1e9 if c[2] else 0.0 for c in m.curve], dtype=float)
        best = np.maximum.accumulate(g)
        axes[0].step(tr, best, where="post", color="tab:gray", ls="--", lw=1.2, label="MetaSchedule (own timing)")
        axes[1].step(ts, best, where="post", color="tab:gray", ls="--", lw=1.2, label="MetaSchedule (own timing)")
        best_seen = max(best_seen, float(best.max(initial=0.0)))
    for ax in axes:
        _baseline_lines(ax, res, key, best_seen)
        ax.set_ylabel("best GFLOPS so far")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].set_xlabel("trials")
    axes[1].set_xlabel("wall time (s)")
    axes[2].set_xlabel(f"fraction of the space explored (space: {size:,} configurations)")
    axes[2].set_xscale("log")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{key}  ({flops / 1e9:.3g} GFLOP per call)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_boxes(res: BenchResult, path: Path) -> None:
    plt = agg_pyplot()
    keys = [k for k in res.flops if any(res.runs_of(k, s) for s in res.strategies)]
    if not keys:
        return
    n = len(keys)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        data = [[r.best_gflops for r in res.runs_of(key, s)] for s in res.strategies]
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(res.strategies) + 1))
        ax.set_xticklabels(res.strategies, rotation=30, fontsize=7)
        _baseline_lines(ax, res, key, max((max(d) for d in data if d), default=0.0))
        ax.set_title(key, fontsize=7)
        ax.set_ylabel("best GFLOPS", fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:  # in a strip of its own under the axes, so that it hides no tick label
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.suptitle(f"best GFLOPS over {res.seeds} seeds at a budget of {res.budget} trials"
                 + (f" / {res.budget_seconds:g} s" if res.budget_seconds else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.3 / (3.4 * rows) if handles else 0, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_overview(res: BenchResult, path: Path) -> bool:
    plt = agg_pyplot()
    keys, ratios = [], {s: [] for s in res.strategies + ["metaschedule"]}
    for key in res.flops:
        v = res.baseline_results.get(key, {}).get("vendor")
        if v is None or not v.ok:
            continue
        vg = v.gflops(res.flops[key])
        keys.append(key)
        for s in res.strategies:
            runs = res.runs_of(key, s)
            ratios[s].append(np.mean([r.best_gflops for r in runs]) / vg if runs else np.nan)
        m = res.baseline_results.get(key, {}).get("metaschedule")
        ratios["metaschedule"].append(m.gflops(res.flops[key]) / vg if m is not None and m.ok else np.nan)
    if not keys:
        return False
    methods = [s for s in ratios if not all(np.isnan(ratios[s]))]
    colors = _colors(res.strategies)
    colors["metaschedule"] = "tab:gray"
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(keys) * max(1, len(methods)) / 2 + 3), 4.5))
    w = 0.8 / max(1, len(methods))
    x = np.arange(len(keys))
    for i, s in enumerate(methods):
        ax.bar(x + (i - (len(methods) - 1) / 2) * w, ratios[s], w, color=colors[s], label=s)
    ax.axhline(1.0, color="k", ls="--", lw=1)
    ax.set_xticks(x)
    ax.set_xticklabels([short_label(k) for k in keys], rotation=45, ha="right", fontsize=6)
    ax.set_ylabel("best GFLOPS / vendor library")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def make_plots(res: BenchResult, out: Path, final: bool = True, drawn: set | None = None) -> list[str]:
    """Write the figures; returns the file names (relative to ``out``). Curves of workloads in ``drawn``
    (a set of keys, updated) are not drawn again; ``final=False`` skips the figures over all workloads."""
    files = []
    drawn = set() if drawn is None else drawn
    for key in res.flops:
        if not any(res.runs_of(key, s) for s in res.strategies):
            continue
        name = f"curves_{slug(key)}.png"
        if key not in drawn or not (out / name).exists():
            plot_curves(res, key, out / name)
            if key in res.baseline_results:  # complete: its runs and baselines are all in
                drawn.add(key)
        files.append(name)
    if not final:
        return files
    if res.runs:
        plot_boxes(res, out / "boxes.png")
        files.append("boxes.png")
    if plot_overview(res, out / "overview.png"):
        files.append("overview.png")
    return files
