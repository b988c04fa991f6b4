"""Every kernel call of a model built from records, timed in the model: the Relax VM's instrument with the host
clock around each call. The one way the research scripts (``inmodel_calls.py``, ``convs_vs_ort.py``) time a
model's calls. The instrument costs each call about a microsecond of host time; the VM's builtins appear under
their own names (``vm.builtin.*``)."""
from __future__ import annotations

import time


def timed_calls(model: str, records: str, runs: int, warm: int = 3, layout: str = "NHWC"):
    """(the model's tasks, one list per inference of (kernel name, microseconds) in call order): ``warm``
    untimed inferences first, then ``runs`` timed ones; a prepacked kernel is named as its task."""
    import tvm
    from tvm import relax

    from tiletune.model.build import best_configs, compile_module, scheduled_module
    from tiletune.model.source import load
    from tiletune.model.tasks import model_tasks
    from tiletune.target import host_target

    src = load(model)
    tasks = model_tasks(src, host_target(), layout, "float32")
    dev = tvm.cpu()
    vm = relax.VirtualMachine(compile_module(scheduled_module(tasks, best_configs(tasks, records))[0],
                                             tasks.target), dev)
    x = [tvm.runtime.tensor(v, dev) for v in src.random_inputs(0)]
    for _ in range(warm):
        vm["main"](*x)
    state: dict = {"t": 0.0, "log": []}

    def instrument(func, name, before, ret, *args):
        if before:
            state["t"] = time.perf_counter()
        else:
            state["log"].append((str(name).removesuffix("_prepacked"), (time.perf_counter() - state["t"]) * 1e6))
        return 0

    vm.set_instrument(instrument)
    logs = []
    for _ in range(runs):
        state["log"] = []
        vm["main"](*x)
        logs.append(state["log"])
    return tasks, logs
