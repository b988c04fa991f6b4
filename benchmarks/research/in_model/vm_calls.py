"""Every kernel call of a model built from records, timed in the model: the Relax VM's instrument with the host
clock around each call. The one way the research scripts (``inmodel_calls.py``, ``convs_vs_ort.py``) time a
model's calls. The instrument costs each call about a microsecond of host time; the VM's builtins appear under
their own names (``vm.builtin.*``)."""
from __future__ import annotations

import time


class TimedVM:
    """A model built from records in a Relax VM with the instrument installed: ``run(n)`` times ``n`` more
    inferences and returns one list of (kernel name, microseconds) per inference, in call order; a prepacked
    kernel is named as its task. ``warm`` untimed inferences run first. ``swaps``: knobs replaced in the records'
    choices (``build_swap.with_swaps``). ``library``: instead, a library ``model build`` exported (``records``
    unused; ``tasks`` is then None), e.g. one built by another version of tiletune."""

    def __init__(self, model: str, records: str | None, warm: int = 3, layout: str = "NHWC",
                 swaps: dict | None = None, library: str | None = None):
        import tvm
        from tvm import relax

        from tiletune.model.build import best_configs, compile_module, scheduled_module
        from tiletune.model.frontend.source import load
        from tiletune.model.kernels.tasks import model_tasks
        from tiletune.target import host_target

        src = load(model)
        dev = tvm.cpu()
        if library is not None:
            self.tasks = None
            self.vm = relax.VirtualMachine(tvm.runtime.load_module(library), dev)
        else:
            self.tasks = model_tasks(src, host_target(), layout, "float32")
            chosen = best_configs(self.tasks, records)
            if swaps:
                from build_swap import with_swaps  # benchmarks/research/in_model/build_swap.py

                chosen = with_swaps(chosen, swaps)
            self.vm = relax.VirtualMachine(compile_module(scheduled_module(self.tasks, chosen)[0], self.tasks.target),
                                           dev)
        self.x = [tvm.runtime.tensor(v, dev) for v in src.random_inputs(0)]
        for _ in range(warm):
            self.vm["main"](*self.x)
        self.state: dict = {"t": 0.0, "log": []}
        self.vm.set_instrument(self._instrument)

    def _instrument(self, func, name, before, ret, *args):
        if before:
            self.state["t"] = time.perf_counter()
        else:
            self.state["log"].append((str(name).removesuffix("_prepacked"),
                                      (time.perf_counter() - self.state["t"]) * 1e6))
        return 0

    def run(self, n: int) -> list[list[tuple[str, float]]]:
        logs = []
        for _ in range(n):
            self.state["log"] = []
            self.vm["main"](*self.x)
            logs.append(self.state["log"])
        return logs


def timed_calls(model: str, records: str, runs: int, warm: int = 3, layout: str = "NHWC", swaps: dict | None = None):
    """(the model's tasks, one list per inference of (kernel name, microseconds) in call order): ``warm``
    untimed inferences first, then ``runs`` timed ones (``TimedVM``)."""
    t = TimedVM(model, records, warm, layout, swaps)
    return t.tasks, t.run(runs)
