"""The top constructions of Gensor and Roller on a suite, written down and measured (not a test): compares
what two versions of the analytic model construct, in one warm pool per workload.

    python benchmarks/research/construct/construct_top.py write old.json                    # this checkout's top k per method
    git apply CHANGE.diff; python benchmarks/research/construct/construct_top.py write new.json; git apply -R CHANGE.diff
    python benchmarks/research/construct/construct_top.py measure old.json new.json --out DIR
    python benchmarks/research/construct/construct_top.py rank benchmarks/out/construct-refine-128/*/records.jsonl.gz

``write`` builds, per workload of ``--suite`` (default construct-refine), the top ``--k`` (default 4)
configurations of ``gensor`` (its walks seeded with ``--seed``) and ``roller``, as the local searches'
``start=gensor|roller`` get them. ``measure`` times every configuration of the given files ``--rounds``
times (default 3; round 1 also warms the pool) in one pool per workload, all of a workload's configurations
in each round (so both files' tops share one machine state), and writes ``DIR/measured.jsonl`` (one line per
configuration: file, method, rank, median GFLOPS of the later rounds) and ``DIR/summary.md`` (per workload
and method: best and mean of the top k, per file). Run it on an idle machine.

``rank`` measures nothing: over the configurations in records files (best GFLOPS per configuration) that
satisfy the analytic model's own fit rules (the ones a construction can build), it prints per workload how
many there are, the mean measured GFLOPS of the ``--top`` (default 20) the model ranks fastest as a fraction
of the best measured, and the Spearman correlation of model time and measured time. The records come from
searches (biased towards good configurations), so this ranks within what was measured, not the space.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.bench.suites import load  # noqa: E402
from tiletune.construct import constructions  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.records import config_key  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.target import host_target  # noqa: E402
from tiletune.workloads import parse  # noqa: E402

METHODS = ("gensor", "roller")


def write(path: Path, suite_name: str, k: int, seed: int) -> dict:
    suite = load(suite_name)
    levels, tgt = parse_levels(suite.levels), host_target()
    out: dict = {"suite": suite_name, "k": k, "seed": seed, "tops": {}}
    for key in suite.workloads:
        wl = parse(key)
        space = make_space(wl, levels, tgt)
        out["tops"][wl.key] = {m: [space.to_dict(c) for c in constructions(
            m, space, workload=wl, target=tgt, k=k, rng=np.random.default_rng(seed))] for m in METHODS}
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return out


def measure(files: list[Path], out: Path, rounds: int) -> list[dict]:
    sets = {f.stem: json.loads(f.read_text(encoding="utf-8")) for f in files}
    suite = load(next(iter(sets.values()))["suite"])
    levels, tgt = parse_levels(suite.levels), host_target()
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for key in suite.workloads:
        wl = parse(key)
        space = make_space(wl, levels, tgt)
        items = [(name, m, i, c, config_key(c)) for name, s in sets.items() for m in METHODS
                 for i, c in enumerate(s["tops"].get(wl.key, {}).get(m, []))]
        unique = list(dict.fromkeys(ck for *_, ck in items))
        configs = [space.from_dict(json.loads(u)) for u in unique]
        times: list[list[float]] = [[] for _ in configs]
        with make_measurer(wl, space, tgt) as meas:
            meas.warm_up()
            for r in range(rounds):
                for j, res in enumerate(meas.measure(configs)):
                    if res.costs and (r > 0 or rounds == 1):
                        times[j].append(statistics.median(res.costs))
        gflops = {u: (wl.flops / statistics.median(t) / 1e9 if t else 0.0) for u, t in zip(unique, times)}
        for name, m, i, c, ck in items:
            line = {"workload": wl.key, "file": name, "method": m, "rank": i, "config": c,
                    "gflops": round(gflops[ck], 1)}
            lines.append(line)
            print(json.dumps(line), flush=True)
    (out / "measured.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    rows = ["# Top constructions measured (GFLOPS: best / mean of the top k)", "",
            "| workload | " + " | ".join(f"{m} ({n})" for m in METHODS for n in sets) + " |",
            "|---|" + "---:|" * (len(METHODS) * len(sets))]
    for key in dict.fromkeys(x["workload"] for x in lines):
        cells = []
        for m in METHODS:
            for n in sets:
                g = [x["gflops"] for x in lines if x["workload"] == key and x["method"] == m and x["file"] == n]
                cells.append(f"{max(g):.0f} / {statistics.mean(g):.0f}" if g else "-")
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    (out / "summary.md").write_text("\n".join(rows) + "\n", encoding="utf-8")
    print("\n".join(rows))
    return lines


def rank(paths: list[Path], top: int) -> list[dict]:
    from scipy.stats import spearmanr

    from tiletune.analytic.etir import Model
    from tiletune.records import load as load_records

    tgt = host_target()
    best: dict[str, dict[str, float]] = {}
    for p in paths:
        for r in load_records(p):
            if r.gflops:
                d = best.setdefault(r.workload, {})
                k = config_key(r.config)
                d[k] = max(d.get(k, 0.0), r.gflops)
    out = []
    for key, d in best.items():
        wl = parse(key)
        space = make_space(wl, target=tgt)
        model = Model(space, wl, None, tgt)
        rows = [(space.from_dict(json.loads(k)), g) for k, g in d.items()]
        rows = [(c, g) for c, g in rows if model.fits(model.from_config(c), model.n - 1)]
        if len(rows) < 2:
            continue
        g = np.array([x for _, x in rows])
        t = np.array([model.config_time(c) for c, _ in rows])
        order = np.argsort(t, kind="stable")
        line = {"workload": key, "fitting": len(rows), "best_gflops": round(float(g.max()), 1),
                f"top{top}_mean_of_best": round(float(g[order[:top]].mean() / g.max()), 3),
                "spearman": round(float(spearmanr(t, 1 / g).correlation), 3)}
        out.append(line)
        print(json.dumps(line), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write this checkout's top constructions to a JSON file")
    w.add_argument("path")
    w.add_argument("--suite", default="construct-refine")
    w.add_argument("--k", type=int, default=4)
    w.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("measure", help="measure the constructions of one or more written files")
    m.add_argument("files", nargs="+")
    m.add_argument("--out", required=True)
    m.add_argument("--rounds", type=int, default=3)
    r = sub.add_parser("rank", help="how the analytic model ranks the measured configurations of records files")
    r.add_argument("records", nargs="+")
    r.add_argument("--top", type=int, default=20)
    a = ap.parse_args(argv)
    if a.cmd == "rank":
        rank([Path(p) for p in a.records], a.top)
    elif a.cmd == "write":
        write(Path(a.path), a.suite, a.k, a.seed)
    else:
        measure([Path(f) for f in a.files], Path(a.out), a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
