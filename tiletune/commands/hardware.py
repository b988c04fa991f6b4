"""tiletune hardware [--preset NAME] [--no-cache] [--no-measure] [-o FILE]"""
from __future__ import annotations

from ..hardware import detect_cpu, preset, presets
from ..paths import check_output
from .common import add_output_argument


def add_parser(sub) -> None:
    p = sub.add_parser(
        "hardware", help="print the hardware spec (this CPU, or a GPU preset) as JSON",
        description="Print a HardwareSpec as JSON: this machine's CPU (detected; the DRAM bandwidth is measured "
        "once, about 0.3 s, and cached in ~/.cache/tiletune/hardware.json) or a GPU preset. Edit the output and "
        "pass it back with a target's \"hardware\" entry to describe your own machine.")
    p.add_argument("--preset", default=None, metavar="NAME", help="GPU preset: " + ", ".join(presets()))
    p.add_argument("--no-cache", action="store_true", help="detect and measure again, ignoring the cache file")
    p.add_argument("--no-measure", action="store_true", help="do not measure the DRAM bandwidth (estimate it)")
    add_output_argument(p, default=None, metavar="FILE", help="also write the JSON to FILE")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.output:
        check_output(args.output, "output file", parents=False)
    if args.preset:
        spec = preset(args.preset)
    else:
        spec = detect_cpu(measure_bandwidth=not args.no_measure, cache=not args.no_cache)
    text = spec.to_json()
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0
