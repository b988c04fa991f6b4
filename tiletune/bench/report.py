"""The markdown report of a benchmark run: machine, settings, tables, baselines, plots."""
from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from .plots import slug
from .results import BenchResult


def last_line(text: str) -> str:
    """The last non-empty line of a message (a traceback's exception line)."""
    lines = [x.strip() for x in (text or "").strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def _g(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _time(ts: float | None) -> str:
    if not ts:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def render(res: BenchResult, summary: dict[str, Any]) -> str:
    s = res.suite
    m = res.machine
    lines: list[str] = [f"# Benchmark: {s.name}", "", s.description, ""]
    if not summary.get("complete"):
        lines += [f"**Partial results**: {len(res.workloads_done)} of {len(s.workloads)} workloads finished.", ""]
    lines += ["## Setup", "",
              "| | |", "|---|---|",
              f"| suite | `{s.source or s.name}` |",
              f"| strategies | {', '.join(res.strategies)} |",
              f"| seeds | {res.seeds} (0..{res.seeds - 1}) |",
              f"| budget | {res.budget} trials" + (f", at most {res.budget_seconds:g} s" if res.budget_seconds else "")
              + " per run |",
              f"| levels | {s.levels or '4,2 (default)'} |",
              f"| measurer | " + (f"replay of `{res.replay}` (baselines still measured on this machine)"
                                  if res.replay else "local (warm build workers, sequential runs, checked "
                                  "against numpy)") + " |",
              f"| baselines | {', '.join(res.baselines) or 'none'} |",
              f"| started / finished | {_time(res.started)} / {_time(res.finished)} |",
              "", "### Machine", "", "| | |", "|---|---|"]
    for k in ("cpu", "cpu_family_model", "cores", "logical_cpus", "memory_gib", "os", "host", "python", "tvm",
              "tvm_ffi", "numpy", "blas", "torch", "torch_threads", "xgboost", "matplotlib", "tiletune"):
        lines.append(f"| {k} | {_g(m.get(k))} |")
    lines.append(f"| target | `{m.get('target')}` |")
    if res.peak:
        lines.append(f"| fp32 peak | {res.peak.gflops:.1f} GFLOPS ({res.peak.source}: {res.peak.detail}) |")
    lines.append("")
    if s.notes:
        lines += ["### Suite notes", "", s.notes, ""]

    # ---- the main table: one row per workload, one column group per method
    lines += ["## Results", "",
              "Best GFLOPS found per run, mean ± std over seeds (× vendor = mean / vendor library; "
              "% peak = mean / fp32 peak). Baselines are measured once per workload in the same run.", ""]
    peak = res.peak.gflops if res.peak else None
    for key, entry in summary["workloads"].items():
        flops = entry["flops"]
        lines += [f"### `{key}`", "",
                  f"{flops / 1e9:.4g} GFLOP per call; space of {entry['space_size']:,} configurations.", "",
                  "| method | best GFLOPS | min / max | × vendor | % peak | trials | time (s) | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, d in entry["strategies"].items():
            st = d["best_gflops"]
            lines.append(f"| {name} | {_g(st['mean'])} ± {_g(st['std'])} | {_g(st['min'])} / {_g(st['max'])} | "
                         f"{_g(d['vs_vendor'])} | {_g(d['pct_peak'], 1)} | {_g(d['trials_mean'], 0)} | "
                         f"{_g(d['elapsed_s_mean'], 1)} | {_g(d['errors_mean'], 1)} |")
        base = entry["baselines"]
        v = base.get("vendor")
        v_g = v["gflops"] if v and v.get("median_s") else None
        for name, b in base.items():
            gf = b["gflops"] if b.get("median_s") else None
            label = f"{name}: {b['label']}" if b.get("label") else name
            if gf is None:
                msg = last_line(b.get("message") or "")[:120].replace("|", "/")
                lines.append(f"| {label} | failed: {b.get('error')} | | | | {_g(b.get('trials') or None)} | "
                             f"{_g(b.get('wall_s'), 1)} | {msg} |")
            else:
                lines.append(f"| {label} | {gf:.2f} | | {_g(gf / v_g if v_g else None)} | "
                             f"{_g(100 * gf / peak if peak else None, 1)} | {_g(b.get('trials') or None)} | "
                             f"{_g(b.get('wall_s'), 1)} | |")
        if peak:
            lines.append(f"| peak | {peak:.1f} | | {_g(peak / v_g if v_g else None)} | 100 | | | |")
            if any((d.get("pct_peak") or 0) > 100 for d in entry["strategies"].values()):
                lines += ["", "Above 100% of the peak: a peak inferred from the clock the machine reports (the "
                          "Setup's fp32 peak row says which) is below what boost clocks reach (common on VMs, "
                          "where no maximum clock is exposed); a measured one moves with the clock from run to "
                          "run."]
        img = f"curves_{slug(key)}.png"
        if img in summary.get("plots", []):
            lines += ["", f"![{key}]({img})"]
        lines.append("")

    # ---- overall
    if len(summary["workloads"]) > 1 and res.strategies:
        lines += ["## Overall", "", "Geometric mean over workloads of (mean best GFLOPS / vendor library):", "",
                  "| method | geomean × vendor | workloads |", "|---|---|---|"]
        methods = list(res.strategies) + ["metaschedule"]
        for meth in methods:
            ratios = []
            for entry in summary["workloads"].values():
                if meth in entry["strategies"]:
                    r = entry["strategies"][meth]["vs_vendor"]
                else:
                    b = entry["baselines"].get(meth)
                    v = entry["baselines"].get("vendor")
                    r = (b["gflops"] / v["gflops"] if b and v and b.get("median_s") and v.get("median_s") else None)
                if r:
                    ratios.append(r)
            if ratios:
                gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                lines.append(f"| {meth} | {gm:.3f} | {len(ratios)} |")
        lines.append("")
    errs = []
    for key, entry in summary["workloads"].items():
        for name, d in entry["strategies"].items():
            kinds: dict[str, int] = {}
            samples: dict[str, str] = {}
            for r in d["runs"]:
                for k, n in r["error_kinds"].items():
                    kinds[k] = kinds.get(k, 0) + n
                for k, msg in r.get("error_samples", {}).items():
                    samples.setdefault(k, msg)
            for k, n in sorted(kinds.items()):
                errs.append(f"| `{key}` | {name} | {k} | {n} | {samples.get(k, '')[:160].replace('|', '/')} |")
    if errs:
        lines += ["## Failed trials", "", "Trials that gave no timing, by kind, over all seeds (`invalid` = "
                  "rejected by the schedule template before building).", "",
                  "| workload | strategy | kind | count | first message |", "|---|---|---|---|---|"] + errs + [""]
    figs = [p for p in summary.get("plots", []) if not p.startswith("curves_")]
    if figs:
        lines += ["## Figures", ""]
        for p in figs:
            lines += [f"![{p}]({p})", ""]
    lines += ["## Files", "",
              "- `records.jsonl`: every trial (tiletune records; strategy and seed in each line)",
              "- `traces.jsonl`: per run, (trial, seconds, GFLOPS, best so far)",
              "- `baselines.jsonl`: vendor library and MetaSchedule results (MetaSchedule's own curve included)",
              "- `summary.json`, `summary.csv`: the statistics above",
              "- `metaschedule.log`: MetaSchedule's log, when it ran", ""]
    return "\n".join(lines)
