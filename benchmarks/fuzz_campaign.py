"""A differential fuzzing campaign of whole models (tiletune.fuzz).

Generates ``--models`` random small PyTorch models (seeds ``--seed`` on), runs each through tiletune's torch.export
and ONNX import paths (import, fuse, build with default schedules; every ``--tune-every``-th model after a few
tuning trials) and compares every output with PyTorch's. Each model is one JSON line in OUT/results.jsonl, written as
soon as it is done: a rerun with the same arguments resumes where the last one stopped. Every mismatch (a wrong
result) and crash (an exception, or the worker process died or hung) is reduced to a small reproducer,
OUT/repro/seed-S-PATH.py (``tiletune model build OUT/repro/seed-S-PATH.py:model --output m.so`` builds it). The
summary, OUT/summary.md: models tried and, per path, matched / refused by reason / mismatch / crash / skip.

    python benchmarks/fuzz_campaign.py --models 100 --seed 0 --out benchmarks/out/fuzz
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tiletune.fuzz.campaign import campaign  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=100, help="how many models (seeds SEED .. SEED+MODELS-1)")
    ap.add_argument("--seed", type=int, default=0, help="the first model's seed (default 0)")
    ap.add_argument("--out", default="benchmarks/out/fuzz", help="the campaign's directory (results.jsonl, "
                    "reduced.jsonl, summary.md, repro/); an existing one is resumed")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes running models at once (default 1)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one model may take before it counts as "
                    "a crash (its worker is killed and replaced; default 180)")
    ap.add_argument("--tune-every", type=int, default=5, help="tune every N-th model (0: none; default 5)")
    ap.add_argument("--tune-trials", type=int, default=2, help="random-search trials per task of a tuned model "
                    "(default 2)")
    ap.add_argument("--paths", default="torch,onnx", help="the import paths, comma-separated (default torch,onnx)")
    ap.add_argument("--no-reduce", action="store_true", help="do not reduce the failures to reproducers")
    a = ap.parse_args(argv)
    rows = campaign(a.out, a.models, a.seed, jobs=a.jobs, timeout=a.timeout, tune_every=a.tune_every,
                    tune_trials=a.tune_trials, paths=tuple(a.paths.split(",")), reduce=not a.no_reduce)
    print((Path(a.out) / "summary.md").read_text())
    bad = sum(r["paths"][p]["outcome"] in ("mismatch", "crash") for r in rows for p in r.get("paths", {}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
