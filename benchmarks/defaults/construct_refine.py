"""Construct, then refine: every local search at small budgets, with its paper's start and with
the constructive default, against random search and against the best found in 900 trials. Not a test.

The ``construct-refine`` suite runs through the benchmark harness (``tiletune.bench.run_bench``: real
measurements, warm workers, one records/traces directory per setting) in settings, each a subdirectory of
``--out`` that resumes on its own (runs are kept per (workload, strategy, seed) in its traces.jsonl, so an
interrupted run goes on where it stopped and a repeated command does nothing twice):

    paper/      every strategy with its paper's start: gbfs/na2c start=untiled, the others start=random and
                prior=none, GA with AutoTVM's pop_size 100; plus random search
    default/    every local search with the current defaults (start, prior, GA's pop_size), pinned explicitly
    reference/  ``--reference`` strategies (default: xgb, random) with the defaults for ``--reference-budget``
                trials (default 900), ``--reference-seeds`` seeds, and the vendor baseline; another name
                starting with ``reference`` (``--reference-name``) adds reference runs of other strategies
                to a directory whose ``reference/`` pins the options of the first ones
    <name>/     each ``--variant NAME:opt=v,opt=v`` (e.g. gensor:start=gensor, prior:prior=analytic): the
                defaults with these options on every local search that has them; with ``--transfer`` the
                learned cost models of its runs also start from the reference runs' records of the other
                workloads of the same operator (``transfer_files``; written to ``<name>/transfer/``)

Each run goes to the largest budget; the result at 16 / 48 trials is the prefix of that run (no strategy
looks at the budget). Then ``construct_refine.md`` / ``.json`` in ``--out``: per workload and budget the
seed-mean best GFLOPS of every (strategy, setting), random search, the best of the reference runs (900
trials) and the best of any run (a short run can find a kernel the reference runs did not), and the goals
of the issue (at 48 trials every local search >= random on every workload; the best strategy within 10% of
the 900-trial best; both judged for the setting whose pinned options are this checkout's defaults,
``current_setting``, and the second also against the best of any run, the stricter), and
``curves_<workload>.png``: best GFLOPS against trials, seed means: solid for the current defaults, dashed
for the papers' starts (``paper/``, and ``paper-random/`` when there is one), dotted for ``default/`` when it
is not the current defaults (other variants are in the report, not the plot).

    python benchmarks/defaults/construct_refine.py --out cr                       # the whole suite: ~3.5 h (Zen 5)
    python benchmarks/defaults/construct_refine.py --out cr --workloads 1 --seeds 2 --budget 48 --no-reference
    python benchmarks/defaults/construct_refine.py --analyze cr                   # the report from what is there
    python benchmarks/defaults/construct_refine.py --tiny --out /tmp/cr-tiny      # minutes: proves the pipeline
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # gzjsonl

from gzjsonl import existing, read_lines, unpack  # noqa: E402
from tiletune.bench.results import RunResult  # noqa: E402
from tiletune.bench.suites import load  # noqa: E402
from tiletune.errors import TiletuneError  # noqa: E402
from tiletune.strategies import get  # noqa: E402
from tiletune.strategies.learned import DEFAULT_PRIOR, EVO_PRIOR  # noqa: E402
from tiletune.strategies.starts import CONSTRUCTIVE_STARTS, DEFAULT_START  # noqa: E402

LOCAL = ("gbfs", "na2c", "dgd", "xgb", "evo", "ga")
PAPER_START = {"gbfs": "untiled", "na2c": "untiled"}  # the others: random
PAPER_EXTRA = {"ga": {"pop_size": 100}}  # AutoTVM's GATuner
#: options besides start and prior whose defaults were chosen by measurement: pinned in every setting, so
#: that a directory resumes only with what it was measured with (directories made before GA's pop_size
#: was pinned were measured with 100, which their bench.json now says; those made before start_sweep, e.g.
#: new-default, with start_sweep=0, which their bench.json does not say: they resume no longer)
PINNED = ("start", "start_sweep", "prior", "pop_size")
BUDGETS = (16, 48, 128)


def paper_options(strategies) -> dict[str, dict]:
    out = {}
    for s in strategies:
        o = {}
        if get(s).has_option("start"):
            o["start"] = PAPER_START.get(s, "random")
        if get(s).has_option("prior"):
            o["prior"] = "none"
        o.update(PAPER_EXTRA.get(s, {}))
        if o:
            out[s] = o
    return out


def default_options(strategies, extra: dict | None = None) -> dict[str, dict]:
    """Each strategy's current defaults of the ``PINNED`` options, pinned (so that a directory made with
    them resumes only with them), with ``extra`` on top."""
    out = {}
    for s in strategies:
        declared = get(s).check_options({})  # every option at its declared default
        o = {name: declared[name] for name in PINNED if name in declared}
        for k, v in (extra or {}).items():
            if get(s).has_option(k):
                o[k] = v
        if o.get("start") not in CONSTRUCTIVE_STARTS:
            o.pop("start_sweep", None)  # sweeps only constructions: not a setting of the other starts
        if o:
            out[s] = o
    return out


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, opts = text.partition(":")
    if not name or not name.replace("-", "").replace("_", "").isalnum() or name in ("paper", "default", "reference"):
        raise TiletuneError(f"--variant {text!r}: expected NAME:opt=value,... with a new NAME of letters/digits")
    d = {}
    for item in filter(None, opts.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise TiletuneError(f"--variant {text!r}: {item!r} is not opt=value")
        v = v.strip()
        d[k.strip()] = int(v) if v.lstrip("-").isdigit() else v  # pop_size=16 pins 16, as the defaults do
    return name, d


def file_slug(workload: str) -> str:
    """A workload key as a file name (the curves' PNGs, the transfer files)."""
    return "".join(ch if ch.isalnum() else "_" for ch in workload)[:80]


def transfer_files(out: Path, where: Path, workloads) -> dict[str, list[str]]:
    """Per workload, one records file in ``where`` holding the records of every reference run (the
    ``reference*`` settings of ``out``) of the other workloads of the same operator (``gemm``, ``conv2d``,
    ...): what ``--transfer`` gives that workload's runs. Workloads without such records are left out."""
    from tiletune.records import iter_records
    from tiletune.workloads import parse

    keys = [parse(w).key for w in workloads]
    by_workload: dict[str, list[str]] = {}
    for d in sorted(p for p in out.iterdir() if is_reference(p.name) and existing(p / "records.jsonl")):
        for r in iter_records(existing(d / "records.jsonl"), warn=False):
            by_workload.setdefault(r.workload, []).append(r.to_json())
    where.mkdir(parents=True, exist_ok=True)
    files = {}
    for k in keys:
        peers = [w for w in by_workload if w != k and w.split(":")[0] == k.split(":")[0]]
        if not peers:
            continue
        path = where / f"{file_slug(k)}.jsonl"
        lines = [line for w in sorted(peers) for line in by_workload[w]]
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        files[k] = [str(path)]
    return files


# ---- analysis ---------------------------------------------------------------------------------------
def is_reference(setting: str) -> bool:
    return setting.startswith("reference")


def load_runs(out: Path) -> dict[str, list[RunResult]]:
    """setting -> runs, from every <setting>/traces.jsonl (or traces.jsonl.gz) under ``out``."""
    runs: dict[str, list[RunResult]] = {}
    for d in sorted(p for p in out.iterdir() if existing(p / "traces.jsonl")):
        for line in read_lines(d / "traces.jsonl"):
            runs.setdefault(d.name, []).append(RunResult(**json.loads(line)))
    return runs


def current_setting(out: Path, runs: dict[str, list[RunResult]]) -> str:
    """The setting whose pinned options (its bench.json) are this checkout's defaults for its strategies,
    without transfer data; of several (the options stayed, the code behind them changed: a new construction),
    the one whose runs finished last (the last line of its records.jsonl), then ``default``, then by name;
    ``default`` when none is."""
    names = sorted((n for n in runs if not is_reference(n) and n != "paper"), key=lambda n: (n != "default", n))
    matching = []
    for name in names:
        try:
            manifest = json.loads((out / name / "bench.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        strategies = sorted({r.strategy for r in runs[name]} & set(LOCAL))
        if strategies and manifest.get("options", {}) == default_options(strategies) and not manifest.get("transfer"):
            matching.append(name)
    if not matching:
        return "default"
    return max(matching, key=lambda n: (last_finished(out / n / "records.jsonl"), -matching.index(n)))


def last_finished(path: Path) -> float:
    """The ``finished`` time of the last record in ``path`` or ``path.gz`` (0 without one): when that setting's
    runs ended."""
    try:
        if (existing(path) or path).suffix == ".gz":
            lines = read_lines(path)
        else:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 65536))
                lines = [x for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
        return float(json.loads(lines[-1]).get("finished") or 0.0) if lines else 0.0
    except (OSError, EOFError, ValueError, AttributeError):
        return 0.0


def analyze(out: Path, budgets=BUDGETS) -> dict:
    runs = load_runs(out)
    if not runs:
        raise TiletuneError(f"{out}: no <setting>/traces.jsonl to analyse")
    workloads = list(dict.fromkeys(r.workload for rs in runs.values() for r in rs))
    table: dict = {}
    for wl in workloads:
        best_any = max((r.best_gflops for rs in runs.values() for r in rs if r.workload == wl), default=0.0)
        ref = [r for setting, rs in runs.items() if is_reference(setting) for r in rs if r.workload == wl]
        row = {"best_any": best_any, "best_reference": max((r.best_gflops for r in ref), default=0.0),
               "reference_trials": max((r.trials for r in ref), default=0),
               "reference_strategies": sorted({r.strategy for r in ref}), "methods": {}}
        for setting, rs in runs.items():
            if is_reference(setting):
                continue
            for strat in sorted({r.strategy for r in rs if r.workload == wl}):
                mine = [r for r in rs if r.workload == wl and r.strategy == strat]
                label = "random" if strat == "random" else f"{strat}/{setting}"
                row["methods"][label] = {
                    str(b): {"mean": statistics.fmean(r.best_at(b) for r in mine),
                             "min": min(r.best_at(b) for r in mine), "max": max(r.best_at(b) for r in mine),
                             "seeds": len(mine)}
                    for b in budgets if all(r.trials >= b or r.stopped != "trials" for r in mine)}
        table[wl] = row
    goal = 48 if 48 in budgets else max(budgets)  # the goals are at 48 trials
    current = current_setting(out, runs)
    goals = {}
    for wl, row in table.items():
        at48 = {m: v[str(goal)]["mean"] for m, v in row["methods"].items() if str(goal) in v}
        rnd = at48.get("random")
        current_local = {m: g for m, g in at48.items() if m.endswith(f"/{current}")}
        best = max(current_local.values(), default=0.0)
        goals[wl] = {
            "local_below_random_at_48": sorted(m for m, g in current_local.items() if rnd is not None and g < rnd),
            "best_at_48": best,
            "best_at_48_any_setting": max(at48.values(), default=0.0),
            "within_10pct_of_reference": bool(row["best_reference"]) and best >= 0.9 * row["best_reference"],
            "within_10pct_of_best_any": bool(current_local) and best >= 0.9 * row["best_any"],
            "best_at_48_vs_best_any": best / row["best_any"] if row["best_any"] else 0.0,
            "best_at_48_vs_reference": best / row["best_reference"] if row["best_reference"] else None,
        }
    return {"budgets": list(budgets), "goal_trials": goal, "current_setting": current, "workloads": table,
            "goals": goals, "confirmed": confirmed(out, current)}


def confirmed(out: Path, current: str | None = None) -> dict:
    """The goals judged on re-measured kernels: ``OUT/confirm.jsonl`` of ``retime_construct_refine.py --confirm
    SETTING`` (every kernel of a workload re-measured in one warm pool, in rounds). A kernel's figure is the
    fastest of its rounds after the first (the first also warms the pool; of all of them with fewer than three):
    every kernel gets the same number of rounds, and this machine's interference only slows a round down, in
    bursts that can spoil two rounds in a row (GEMM 512^3: 494, 493, 342, 348), which a median of three follows.
    Per workload: the reference (the best re-measured kernel of the long runs), best any (the best re-measured
    kernel of all, the top runs by record included), per strategy the seed mean of its runs' best kernels
    within the first ``at`` trials, random's likewise; the best strategy's mean against both, among the runs of
    the ``current`` setting when the file has them (else among all). {} without the file."""
    path = out / "confirm.jsonl"
    if not path.exists():
        return {}
    rows: dict[str, dict] = {}
    for text in path.read_text(encoding="utf-8").splitlines():
        if not text.strip():
            continue
        r = json.loads(text)
        xs = r["remeasured_gflops"]
        g = max(xs[1:] if len(xs) >= 3 else xs) if xs else 0.0
        row = rows.setdefault(r["workload"], {"reference": 0.0, "best_any": 0.0, "runs": {}, "at": None})
        kind, _, who = r["run"].partition(": ")
        row["best_any"] = max(row["best_any"], g)
        if kind == "reference":
            row["reference"] = max(row["reference"], g)
        elif kind.startswith("at"):
            row["at"] = int(kind[2:])
            method, setting, _ = who.split("/")
            label = "random" if method == "random" else f"{method}/{setting}"
            row["runs"].setdefault(label, []).append((g, r["recorded_gflops"]))
    for row in rows.values():
        row["methods"] = {m: {"mean": statistics.fmean(g for g, _ in v), "recorded_mean": statistics.fmean(x for _, x in v),
                              "seeds": len(v)} for m, v in sorted(row.pop("runs").items())}
        local = {m: v["mean"] for m, v in row["methods"].items() if m != "random"}
        mine = {m: g for m, g in local.items() if current and m.endswith(f"/{current}")}
        local = mine or local
        rnd = row["methods"].get("random", {}).get("mean")
        best = max(local.values(), default=0.0)
        row["best"] = best
        row["best_method"] = max(local, key=local.get) if local else None
        row["vs_reference"] = best / row["reference"] if row["reference"] else None
        row["vs_best_any"] = best / row["best_any"] if row["best_any"] else None
        row["below_random"] = sorted(m for m, g in local.items() if rnd is not None and g < rnd)
    return rows


def write_report(out: Path, result: dict) -> None:
    (out / "construct_refine.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    cur = result.get("current_setting", "default")
    lines = ["# Construct, then refine: best GFLOPS at small budgets", "",
             f"Default start: `{DEFAULT_START}`, default prior: `{DEFAULT_PRIOR}` (evo: `{EVO_PRIOR}`). Seed means (min-max); "
             "`/paper` = the paper's start, `/default` = the defaults when the directory was made (its bench.json pins them), other suffixes = variants; "
             "reference = the best of the long reference runs; best any = the best of every run in this directory (reference runs included). "
             f"The goals are judged for `/{cur}`, the setting whose pinned options "
             "are this checkout's defaults.", ""]
    for wl, row in result["workloads"].items():
        g = result["goals"][wl]
        lines += [f"## {wl}", "",
                  f"best any: {row['best_any']:.1f} GFLOPS; reference: {row['best_reference']:.1f} "
                  f"({', '.join(row['reference_strategies']) or 'none'}, {row['reference_trials']} trials); "
                  f"at {result['goal_trials']} trials, the current defaults (`/{cur}`): best {g['best_at_48']:.1f}"
                  + (f" = {g['best_at_48_vs_reference']:.2f} of the reference "
                     f"({'within' if g['within_10pct_of_reference'] else 'NOT within'} 10%)"
                     if g["best_at_48_vs_reference"] else "")
                  + f", {g['best_at_48_vs_best_any']:.2f} of best any "
                  f"({'within' if g['within_10pct_of_best_any'] else 'NOT within'} 10%); "
                  f"best of any setting {g['best_at_48_any_setting']:.1f}; "
                  f"local searches below random: {', '.join(g['local_below_random_at_48']) or 'none'}", "",
                  "| method | " + " | ".join(f"{b} trials" for b in result["budgets"]) + " |",
                  "|---|" + "---|" * len(result["budgets"])]
        for m in sorted(row["methods"]):
            cells = []
            for b in result["budgets"]:
                v = row["methods"][m].get(str(b))
                cells.append(f"{v['mean']:.1f} ({v['min']:.0f}-{v['max']:.0f})" if v else "")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    conf = result.get("confirmed") or {}
    if conf:
        lines += confirmed_section(conf, cur)
    (out / "construct_refine.md").write_text("\n".join(lines), encoding="utf-8")


def confirmed_goals(conf: dict) -> tuple[int, int, int]:
    """Of the workloads of ``confirmed``: (every local search >= random, the best within 10% of the reference,
    within 10% of the best of any run)."""
    rows = conf.values()
    return (sum(not r["below_random"] for r in rows),
            sum(bool(r["vs_reference"]) and r["vs_reference"] >= 0.9 for r in rows),
            sum(bool(r["vs_best_any"]) and r["vs_best_any"] >= 0.9 for r in rows))


def confirmed_section(conf: dict, current: str) -> list[str]:
    at = next(iter(conf.values()))["at"]
    met_rnd, met_ref, met_any = confirmed_goals(conf)
    lines = ["## Confirmed: the goals on re-measured kernels", "",
             f"`confirm.jsonl` (benchmarks/defaults/retime_construct_refine.py --confirm): every run's best kernel within {at} "
             "trials, the long runs' best kernels and the best kernels of any run, re-measured together in one warm "
             "pool per workload (the fastest of the rounds after the first). Per workload: the seed mean of the best "
             f"local search of the current defaults (`/{current}`) against the reference and against the best of any "
             f"run. Goal 1 (every local search >= random) "
             f"met on {met_rnd} of {len(conf)}; goal 2 (within 10%) met on {met_ref} of {len(conf)} against the "
             f"reference, {met_any} against the best of any run.", "",
             "| workload | best local search | its mean (recorded) | random | reference | best any | vs reference | vs best any | below random |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for wl, r in conf.items():
        m = r["methods"].get(r["best_method"], {})
        rnd = r["methods"].get("random")
        lines.append(f"| {wl} | {r['best_method']} | {r['best']:.1f} ({m.get('recorded_mean', 0):.1f}) | "
                     + (f"{rnd['mean']:.1f} | " if rnd else "| ")
                     + f"{r['reference']:.1f} | {r['best_any']:.1f} | "
                     + (f"{r['vs_reference']:.2f} | " if r["vs_reference"] else "| ")
                     + f"{r['vs_best_any']:.2f} | {', '.join(r['below_random']) or 'none'} |")
    methods = sorted({m for r in conf.values() for m in r["methods"]})
    lines += ["", "Every method's re-measured seed mean (recorded mean in brackets):", "",
              "| workload | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    for wl, r in conf.items():
        cells = [f"{r['methods'][m]['mean']:.1f} ({r['methods'][m]['recorded_mean']:.1f})" if m in r["methods"] else ""
                 for m in methods]
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
    return lines + [""]


def plot(out: Path, budget: int) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install 'tiletune[plots]')")
        return []
    runs = load_runs(out)
    current = current_setting(out, runs)
    # the current defaults, the papers' starts (paper-random: those of dgd, xgb, evo, ga) and the first defaults
    shown = {current, "paper", "paper-random", "default"}
    files = []
    workloads = list(dict.fromkeys(r.workload for rs in runs.values() for r in rs))
    for wl in workloads:
        fig, ax = plt.subplots(figsize=(8, 5))
        colors: dict[str, str] = {}
        styles: dict[str, object] = {"paper": "--", "paper-random": "--", "default": ":"}
        for setting, rs in runs.items():
            if is_reference(setting) or setting not in shown:
                continue
            for strat in sorted({r.strategy for r in rs if r.workload == wl}):
                mine = [r for r in rs if r.workload == wl and r.strategy == strat]
                xs = list(range(1, min(budget, max(r.trials for r in mine)) + 1))  # not past the runs' budget
                ys = [statistics.fmean(r.best_at(x) for r in mine) for x in xs]
                c = colors.setdefault(strat, f"C{len(colors) % 10}")
                style = "-" if setting == current or strat == "random" else styles[setting]
                lab = strat if strat == "random" else f"{strat} ({setting})"
                ax.plot(xs, ys, linestyle=style, color="black" if strat == "random" else c, label=lab, linewidth=1.3)
        best_any = max((r.best_gflops for rs in runs.values() for r in rs if r.workload == wl), default=0.0)
        if best_any:
            ax.axhline(best_any, color="grey", linewidth=0.8, linestyle="-.", label="best of any run")
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOPS (mean over seeds)")
        ax.set_title(wl, fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        slug = file_slug(wl)
        path = out / f"curves_{slug}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


# ---- running ----------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="construct-refine-out")
    ap.add_argument("--suite", default="construct-refine")
    ap.add_argument("--workloads", default=None, help="1-based positions ('1,3') or specs separated by ';'")
    ap.add_argument("--strategies", default=",".join(LOCAL), help="local searches to compare")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--budget", type=int, default=None, help="trials per run (default: the suite's, 128)")
    ap.add_argument("--reference", default="xgb,random", help="strategies of the long reference runs")
    ap.add_argument("--reference-budget", type=int, default=900)
    ap.add_argument("--reference-seeds", type=int, default=1)
    ap.add_argument("--reference-name", default="reference",
                    help="directory of the reference runs (a name starting with 'reference')")
    ap.add_argument("--no-reference", action="store_true", help="skip the long reference runs")
    ap.add_argument("--no-paper", action="store_true", help="skip the paper-start runs (and random search)")
    ap.add_argument("--paper-strategies", default=None, metavar="S,S",
                    help="the strategies of the paper-start runs (default: --strategies); random search always runs")
    ap.add_argument("--no-default", action="store_true", help="skip the default-start runs (e.g. to add a variant "
                    "for fewer strategies: each setting directory keeps the strategy options it was made with)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:opt=v,...",
                    help="one more setting: the defaults with these options (repeatable)")
    ap.add_argument("--transfer", action="store_true",
                    help="the --variant settings warm-start the learned cost models (xgb, evo, dgd) from the records "
                    "of the reference runs of the other workloads of the same operator (leave one out; a workload "
                    "without such a peer runs without)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--analyze", metavar="DIR", help="only write the report and plots of DIR")
    ap.add_argument("--tiny", action="store_true", help="a few minutes: 2 small workloads, gbfs/xgb, 1 seed, "
                    "12 trials, reference 24 trials")
    args = ap.parse_args(argv)
    try:
        if args.analyze:
            out = Path(args.analyze)
            top = max((r.trials for name, rs in load_runs(out).items() if not is_reference(name) for r in rs), default=0)
            budgets = tuple(b for b in BUDGETS if b < top) + (top,)
            return _finish(out, budgets)
        if not is_reference(args.reference_name):
            raise TiletuneError(f"--reference-name must start with 'reference', got {args.reference_name!r}")
        out = Path(args.out)
        suite = load(args.suite)
        strategies = [s for s in args.strategies.split(",") if s]
        for s in strategies:
            get(s)
        seeds, budget = args.seeds, args.budget
        ref_budget, ref_seeds, reference = args.reference_budget, args.reference_seeds, args.reference
        if args.tiny:
            suite = replace(suite, workloads=("gemm:M=64,N=64,K=64",
                                              "conv2d:N=1,C=8,H=16,W=16,K=16,R=3,S=3,stride=1,pad=1"))
            strategies = ["gbfs", "xgb"]
            seeds, budget, ref_budget, ref_seeds, reference = 1, 12, 24, 1, "random"
        if args.workloads:
            suite = suite.select(args.workloads)
        budget = budget or suite.budget
        variants = [parse_variant(v) for v in args.variant]
        from tiletune.bench.run import run_bench

        common = dict(budget=budget, seeds=seeds, batch_size=args.batch, resume=True, progress=True)
        if not args.no_paper:
            paper = [s for s in (args.paper_strategies or ",".join(strategies)).split(",") if s]
            for s in paper:
                get(s)
            names = [s for s in paper if s != "random"] + ["random"]
            run_bench(replace(suite, options={}), resumable(out / "paper"), strategies=names, baselines=(),
                      options=paper_options(names), **common)
        if not args.no_default:
            run_bench(replace(suite, options={}), resumable(out / "default"), strategies=strategies, baselines=(),
                      options=default_options(strategies), **common)
        for name, extra in variants:
            transfer = transfer_files(out, out / name / "transfer", suite.workloads) if args.transfer else None
            run_bench(replace(suite, options={}), resumable(out / name), strategies=strategies, baselines=(),
                      options=default_options(strategies, extra), transfer=transfer, **common)
        if not args.no_reference:
            refs = [s for s in reference.split(",") if s]
            run_bench(replace(suite, options={}), resumable(out / args.reference_name), strategies=refs, baselines=("vendor",),
                      options=default_options(refs), budget=ref_budget, seeds=ref_seeds, batch_size=args.batch,
                      resume=True, progress=True)
        budgets = tuple(b for b in BUDGETS if b < budget) + (budget,)
        return _finish(out, budgets)
    except TiletuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def resumable(setting: Path) -> Path:
    """A setting directory to run in: its compressed records and traces (committed results) written back as
    the plain files the harness resumes from and appends to."""
    for name in ("records.jsonl", "traces.jsonl", "baselines.jsonl"):
        unpack(setting / name)
    return setting


def _finish(out: Path, budgets) -> int:
    result = analyze(out, budgets)
    write_report(out, result)
    files = plot(out, max(budgets))
    print((out / "construct_refine.md").read_text(encoding="utf-8"))
    print(f"wrote {out / 'construct_refine.md'}, {out / 'construct_refine.json'}"
          + "".join(f", {f.name}" for f in files))
    goals, cur = result["goals"], result["current_setting"]
    below = sum(not g["local_below_random_at_48"] for g in goals.values())
    ref = sum(bool(g["within_10pct_of_reference"]) for g in goals.values())
    anyb = sum(bool(g["within_10pct_of_best_any"]) for g in goals.values())
    print(f"goals of the current defaults (/{cur}) at {result['goal_trials']} trials, of {len(goals)} workloads: every "
          f"local search >= random on {below}; the best within 10% of the reference on {ref}, of the best of any "
          f"run on {anyb}")
    conf = result.get("confirmed") or {}
    if conf:
        rnd, ok, okany = confirmed_goals(conf)
        print(f"confirmed (re-measured kernels, confirm.jsonl), of {len(conf)} workloads: every local search >= random "
              f"on {rnd}; the best within 10% of the reference on {ok}, of the best of any run on {okany}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
