"""Bert-small's dynamic task set (Fig. 11's 12 shapes): the tasks whose top construction by METHOD changes with
the accumulator round-trip rule, both timed alone alternately (as construct_change.py, one warm pool per task)."""
import statistics, sys
from unittest import mock
sys.path.insert(0, "/work/main")
from tiletune.cost_model import etir
from tiletune.measure.factory import make_measurer
from tiletune.model.build import constructed_configs
from tiletune.model.shapes import parse_shapes, shape_tasks
from tiletune.model.source import load
from tiletune.target import parse_target
method, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
source = load("benchmarks/common/dyn_models.py:bert_small")
b = parse_shapes(["batch=1,4", "seq=16,32,64,128,256,384"], source)
dyn = shape_tasks(source, parse_target("host"), "NHWC", b, dtype="float32")
on = constructed_configs(dyn.merged, method, {}, seed=seed)
with mock.patch.object(etir.Model, "accumulator_turns", False):
    off = constructed_configs(dyn.merged, method, {}, seed=seed)
sums = [0.0, 0.0]
for k in dyn.merged.tasks:
    if k.hash not in on or on[k.hash].config == off[k.hash].config:
        continue
    space = on[k.hash].space
    times = [[], []]
    with make_measurer(k.workload, space, dyn.merged.target) as meas:
        meas.warm_up()
        for r in range(3):
            for j, res in enumerate(meas.measure([off[k.hash].config, on[k.hash].config])):
                if res.costs and r > 0:
                    times[j].append(statistics.median(res.costs))
    us = [1e6 * statistics.median(t) for t in times]
    for j in range(2):
        sums[j] += k.calls * us[j]
    print(f"| {k.name} | {k.calls} | {space.to_dict(off[k.hash].config)} -> {space.to_dict(on[k.hash].config)} | {us[0]:.1f} | {us[1]:.1f} | {us[0]/us[1]:.2f}x |", flush=True)
print(f"| sum | | | {sums[0]:.0f} | {sums[1]:.0f} | {sums[0]/sums[1]:.2f}x |")
