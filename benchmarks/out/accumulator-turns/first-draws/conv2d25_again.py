import statistics, sys
from unittest import mock
import numpy as np
from tiletune.construct import constructions
from tiletune.cost_model import etir
from tiletune.measure.factory import make_measurer
from tiletune.model.source import load
from tiletune.model.tasks import model_tasks
from tiletune.schedules import make_space
from tiletune.target import host_target
t = host_target(); tasks = model_tasks(load("mobilenetv2"), t, "NHWC")
k = next(x for x in tasks.tasks if x.name == "fused_conv2d25_add20_maximum10_minimum10")
sp = make_space(k.workload, None, t)
with mock.patch.object(etir.Model, "accumulator_turns", False):
    off = constructions("gensor", sp, workload=k.workload, target=t, k=1, rng=np.random.default_rng(0))[0]
on = constructions("gensor", sp, workload=k.workload, target=t, k=1, rng=np.random.default_rng(0))[0]
print(k.workload, sp.to_dict(off), sp.to_dict(on), sep="\n")
d = sp.to_dict(off); d2 = dict(d, tile_ff=[2, 10, 1, 48]); d3 = dict(d, tile_ff=[2, 5, 2, 48], unroll=64)
cfgs = [off, on, sp.from_dict(d2)]
times = [[] for _ in cfgs]
with make_measurer(k.workload, sp, t) as meas:
    meas.warm_up()
    for r in range(3):
        for j, res in enumerate(meas.measure(cfgs)):
            if res.costs and r: times[j].append(statistics.median(res.costs))
for c, tt in zip(cfgs, times): print(sp.to_dict(c), [round(x*1e6,1) for x in tt])
