"""One FX graph of ``torch.compile`` through the project's model path, and the callable that runs it.

What dynamo hands the backend (``backend(gm, example_inputs)``) is a ``torch.fx.GraphModule`` whose placeholders
are the user's tensors, the module's parameters and buffers (dynamo lifts them: ``L_self_modules_fc_parameters_weight_``)
and, for symbolic shapes, integers. The way through:

1. **Fall back first where the path does not apply**, with one line on stderr: a graph that needs autograd (grad
   mode on and an input that requires grad), outputs that are not tensors, inputs on two devices.
2. **Freeze**: the parameters and buffers become constants of a wrapper module (``_Frozen``) whose inputs are the
   user's tensors alone, so that the import binds the weights as constants (folded, prepacked for the tuned
   kernels: docs/decisions/weight-prepack.md) as ``tiletune model build`` does. Each call checks that those
   tensors are still the ones compiled in (their storage and version counter); weights changed in place make the
   graph run in PyTorch from then on, with a line. float16 and bfloat16 graphs on a CPU compute in float32 between
   casts at the boundary (on a CPU the model path computes in float32, ``tiletune.target.check_dtype_for``); on CUDA they
   compute in their dtype (``precision.cast``).
3. **The model path**: ``tiletune.model.frontend.source.from_torch`` -> ``tiletune.model.kernels.tasks.model_tasks``
   (torch.export, the one pipeline ``passes.pipeline.prepare``, fusion, task extraction) -> kernels: the tuning
   database's for the tasks it holds (``tiletune.model.build.database_configs``), a construction (``construct``,
   Gensor's by default: no measurement) for the others -> ``build.scheduled_module`` -> ``build.compile_module``.
   An operator the importer cannot take makes the graph run in PyTorch, with a line naming the operator.
4. **Check**: the compiled graph's outputs on the first inputs against PyTorch's (``build.RTOL`` of the outputs'
   dtype, relative to their scale); a mismatch makes the graph run in PyTorch, with a line.
5. **Run**: tensors in and out by DLPack, no copies (an input that is not contiguous or not aligned to
   ``PARAM_ALIGNMENT`` is made contiguous first); outputs are torch tensors on the inputs' device.

Compiled graphs are kept in the cache (``tiletune.torch_backend.cache``).
"""
from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..alignment import PARAM_ALIGNMENT
from ..db.store import Database
from ..errors import TiletuneError, one_line
from ..records import kernel_identity
from ..model.build import RTOL, compare, compile_module, constructed_configs, database_configs, scheduled_module
from ..model.frontend.source import from_torch
from ..model.dynamic.shapes import dynamic_library, recorded_shapes, shape_tasks
from ..model.kernels.tasks import ModelTasks, model_tasks
from ..model.passes.layout import check_layout_for
from ..target import is_cuda, parse_target, target_key
from .cache import GraphCache, graph_key
from .options import Options

HALF = ("float16", "bfloat16")
COUNT = iter(range(1, 1 << 30))  # dynamo's graphs in this process, numbered in the lines the backend says


def say(message: str) -> None:
    """One line on stderr, as the backend says what it did or why a graph runs in PyTorch."""
    print(f"tiletune: {message}", file=sys.stderr, flush=True)


class Fallback(Exception):
    """The graph runs in PyTorch; the message says why (one line)."""


class NotSymbolic(Exception):
    """A symbolic graph that cannot be one library for every shape: it is compiled per shape."""


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _is_weight(node, value) -> bool:
    import torch

    return isinstance(value, torch.nn.Parameter) or bool(re.search(r"_(parameters|buffers)_", node.name))


@dataclass
class Plan:
    """How the graph's placeholders are fed: ("in", position among the user's tensors), ("const", index into
    ``consts``) or ("int", index into ``ints``: a symbolic size, its value now)."""
    roles: list[tuple[str, int]]
    user: list[int]  # placeholder index of each user tensor
    consts: list[int]  # placeholder index of each weight
    ints: list[int]  # placeholder index of each integer
    device: str = "cpu"
    out_dtypes: list[str] = field(default_factory=list)


def plan_graph(gm, example_inputs) -> Plan:
    """The placeholders' roles (``Plan``); ``Fallback`` for what the path does not take."""
    import torch

    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(nodes) != len(example_inputs):
        raise Fallback(f"{len(nodes)} placeholders for {len(example_inputs)} inputs")
    roles, user, consts, ints = [], [], [], []
    devices = set()
    needs_grad = []
    for i, (node, v) in enumerate(zip(nodes, example_inputs)):
        if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):
            roles.append(("int", len(ints)))
            ints.append(i)
        elif isinstance(v, torch.Tensor):
            devices.add(v.device.type)
            if v.requires_grad and not isinstance(v, torch.nn.Parameter):
                needs_grad.append(node.name)
            if _is_weight(node, v):
                roles.append(("const", len(consts)))
                consts.append(i)
            else:
                roles.append(("in", len(user)))
                user.append(i)
        else:
            raise Fallback(f"input {node.name} is a {type(v).__name__}, not a tensor or a size")
    params_grad = [nodes[i].name for i in consts if example_inputs[i].requires_grad]
    if torch.is_grad_enabled() and (needs_grad or params_grad):
        raise Fallback("it needs autograd (grad mode is on and "
                       f"{(needs_grad or params_grad)[0]} requires grad; run under torch.no_grad() or "
                       "torch.inference_mode() for inference)")
    if len(devices) > 1:
        raise Fallback(f"its inputs are on several devices ({', '.join(sorted(devices))})")
    device = devices.pop() if devices else "cpu"
    if device not in ("cpu", "cuda"):
        raise Fallback(f"its inputs are on {device}; tiletune compiles for the CPU and CUDA")
    out = next(n for n in gm.graph.nodes if n.op == "output")
    for a in torch.fx.graph.map_arg(out.args[0], lambda n: n) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]:
        val = a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a
        if not isinstance(val, torch.Tensor):
            raise Fallback(f"an output is a {type(val).__name__}, not a tensor")
    return Plan(roles, user, consts, ints, device)


def _frozen(gm, plan: Plan, example_inputs, compute_f32: bool, sizes: list[tuple[int, int]] | None = None):
    """A module of the user's tensors alone (the module docstring, step 2), on the CPU (the import reads the
    constants from the host), computing in float32 when ``compute_f32``; its example inputs. ``sizes``: each
    integer placeholder as (user tensor, axis) whose size it is (a symbolic graph), else its value now."""
    import torch

    ints = [int(example_inputs[i]) for i in plan.ints] if sizes is None else None

    def host(t, f32: bool):
        t = t.detach().to("cpu")
        return t.float() if f32 and t.is_floating_point() else t

    class _Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm
            for j, i in enumerate(plan.consts):
                self.register_buffer(f"c{j}", host(example_inputs[i], compute_f32))
            self.out_dtypes = None

        def run(self, xs):
            args = []
            if compute_f32:  # the graph's half inputs computed in float32 (the module docstring, step 2)
                xs = [x.float() if x.is_floating_point() else x for x in xs]
            for kind, j in plan.roles:
                if kind == "int":
                    args.append(ints[j] if sizes is None else xs[sizes[j][0]].shape[sizes[j][1]])
                else:
                    args.append(xs[j] if kind == "in" else getattr(self, f"c{j}"))
            out = self.gm(*args)
            out = out if isinstance(out, (tuple, list)) else (out,)
            if compute_f32 and plan.out_dtypes:  # back to the graph's own dtypes at the boundary
                out = [o.to(getattr(torch, d)) if o.is_floating_point() else o for o, d in zip(out, plan.out_dtypes)]
            return tuple(out)

    # forward(self, x0, x1, ...): one named argument per tensor, as torch.export's dynamic_shapes counts them
    names = [f"x{j}" for j in range(len(plan.user))]
    scope: dict = {}
    exec(f"def forward(self, {', '.join(names)}):\n    return self.run(({''.join(n + ', ' for n in names)}))", scope)
    _Frozen.forward = scope["forward"]
    examples = tuple(host(example_inputs[i], False) for i in plan.user)
    return _Frozen(), examples


def symbolic_sizes(gm, plan: Plan) -> tuple[dict[str, tuple[int, int]], list[tuple[int, int]]] | None:
    """A symbolic graph's sizes: {symbol: (user tensor, axis)} of every symbolic axis of the user's tensors, and for
    each integer placeholder the (user tensor, axis) it is the size of; None when an integer placeholder is not the
    size of one axis (an expression of sizes: the graph is then compiled per shape)."""
    import torch

    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    axes: dict[str, tuple[int, int]] = {}
    for j, i in enumerate(plan.user):
        v = nodes[i].meta.get("example_value")
        for a, d in enumerate(getattr(v, "shape", ()) or ()):
            if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False):
                axes.setdefault(str(d.node.expr), (j, a))
    sizes = []
    for i in plan.ints:
        v = nodes[i].meta.get("example_value")
        name = str(v.node.expr) if isinstance(v, torch.SymInt) else None
        if name not in axes:
            return None
        sizes.append(axes[name])
    return (axes, sizes) if axes else None


def unsupported_operators(message: str) -> list[str]:
    """The ATen operators an import error names (TVM's "Unsupported function types [...]"), else []."""
    m = re.search(r"Unsupported function types? \[([^\]]*)\]", message)
    return re.findall(r"'([^']+)'", m.group(1)) if m else []


def weights_digest(tensors) -> str:
    """A digest of the tensors' shapes, dtypes and contents (the compiled graph holds them as constants)."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for t in tensors:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{tuple(t.shape)}{t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@dataclass
class Built:
    """A compiled graph: its loaded module, the tasks' keys and the database state it was built at."""
    module: object  # tvm runtime module (the Relax executable)
    tasks: list[str]
    state: str
    how: dict
    tuned: int = 0
    constructed: int = 0
    seconds: float = 0.0  # to build it (found in the cache: to load it)
    from_cache: bool = False


class GraphCompiler:
    """Everything of one graph that does not change from call to call: its plan, target, key, and how to build it."""

    def __init__(self, gm, example_inputs, opts: Options, db: Database | None = None,
                 cache: GraphCache | None = None, number: int = 0, symbolic: bool = False):
        import torch

        self.gm, self.opts = gm, opts
        self.db = db or Database()
        self.cache = cache if cache is not None else (GraphCache() if opts.cache else None)
        self.number = number or next(COUNT)
        self.plan = plan_graph(gm, example_inputs)
        floats = {_dtype_name(example_inputs[i]) for i in self.plan.user + self.plan.consts
                  if example_inputs[i].is_floating_point()}
        if len(floats) > 1:
            raise Fallback(f"it mixes floating-point dtypes ({', '.join(sorted(floats))})")
        self.dtype = floats.pop() if floats else "float32"
        if self.dtype not in ("float32", *HALF):
            raise Fallback(f"its tensors are {self.dtype}; tiletune compiles float32, float16 and bfloat16")
        if opts.target is not None:
            self.target = parse_target(opts.target)
        elif self.plan.device == "cuda":
            major, minor = torch.cuda.get_device_capability(example_inputs[self.plan.user[0]].device)
            self.target = parse_target(f"cuda:sm_{major}{minor}")
        else:
            self.target = parse_target("host")
        if is_cuda(self.target) != (self.plan.device == "cuda"):
            raise Fallback(f"its inputs are on {self.plan.device}, the target is {self.target['kind']}")
        self.layout = check_layout_for(opts.layout, self.target)
        self.compute_f32 = self.dtype in HALF and not is_cuda(self.target)
        self.compute = "float32" if self.compute_f32 else self.dtype
        self._inputs = example_inputs
        self._example_out: list | None = None  # PyTorch's outputs on the first inputs, when asked (``example_out``)
        self.example_in = [example_inputs[i] for i in self.plan.user]
        self.const_ids = [(example_inputs[i].data_ptr(), example_inputs[i]._version) for i in self.plan.consts]
        self.symbolic = None  # a symbolic graph built as one library: ({symbol: (input, axis)}, sizes)
        if symbolic:
            self.symbolic = symbolic_sizes(gm, self.plan)
            if self.symbolic is None:
                raise NotSymbolic("a size it takes is not the size of one axis of an input")
        sizes = self.symbolic[1] if self.symbolic else None
        self.module, self.examples = _frozen(gm, self.plan, example_inputs, self.compute_f32, sizes)
        ints = [int(example_inputs[i]) for i in self.plan.ints] if not self.symbolic else []
        shapes = [(tuple(t.shape), _dtype_name(t)) for t in self.example_in]
        if self.symbolic:  # one library for every shape: keyed by the axes' symbols, not their sizes now
            where = {v: k for k, v in self.symbolic[0].items()}
            shapes = [(tuple(where.get((j, a), d) for a, d in enumerate(sh)), dt) for j, (sh, dt) in enumerate(shapes)]
        self.key = graph_key(gm.code, shapes, ints, weights_digest([example_inputs[i] for i in self.plan.consts]),
                             target_key(self.target), self.layout, self.compute, opts.construct)
        self.tasks: ModelTasks | None = None
        self.lock = threading.Lock()

    @property
    def example_out(self) -> list:
        """PyTorch's outputs on the graph's first inputs (run once, when a build is made or checked: a graph found
        in the cache does not need them)."""
        if self._example_out is None:
            import torch

            with torch.no_grad():
                want = self.gm(*self._inputs)
            want = list(want) if isinstance(want, (tuple, list)) else [want]
            self.plan.out_dtypes = [_dtype_name(t) for t in want]
            self._example_out = [t.detach() for t in want]
        return self._example_out

    @property
    def name(self) -> str:
        if self.symbolic:
            where = {v: k for k, v in self.symbolic[0].items()}
            shapes = ", ".join("x".join(str(where.get((j, a), d)) for a, d in enumerate(t.shape)) or "scalar"
                               for j, t in enumerate(self.example_in))
        else:
            shapes = ", ".join("x".join(map(str, t.shape)) or "scalar" for t in self.example_in)
        return f"graph {self.number} ({shapes})"

    def _dynamic_shapes(self):
        """torch.export's ``dynamic_shapes`` of the user's tensors: a ``Dim`` per symbol, from 2 up (dynamo
        specializes sizes 0 and 1), unbounded."""
        import torch

        dims = {name: torch.export.Dim(name, min=2) for name in self.symbolic[0]}
        where: dict[int, dict] = {j: {} for j in range(len(self.example_in))}
        nodes = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for j, i in enumerate(self.plan.user):
            v = nodes[i].meta.get("example_value")
            for a, d in enumerate(getattr(v, "shape", ()) or ()):
                if isinstance(d, torch.SymInt) and str(d.node.expr) in dims:
                    where[j][a] = dims[str(d.node.expr)]
        return tuple(where.get(j) or None for j in range(len(self.example_in)))

    def import_tasks(self) -> ModelTasks:
        """The graph's kernels through the model path (steps 2-3 of the module docstring)."""
        if self.tasks is None:
            self.example_out  # the outputs' dtypes, which the frozen module casts back to
            dynamic = self._dynamic_shapes() if self.symbolic else None
            try:
                source = from_torch(f"graph {self.number}", f"graph{self.number}", self.module, self.examples,
                                    dynamic)
                if self.symbolic:  # the first call's shape and those the database holds tuned kernels of
                    binding = {n: int(self.example_in[j].shape[a]) for n, (j, a) in self.symbolic[0].items()}
                    tuned = recorded_shapes(source, self.target, self.layout, self.db.records(self.target),
                                            dtype=self.compute)
                    bindings = [binding] + [b for b in tuned if b != binding]
                    self.dyn = shape_tasks(source, self.target, self.layout, bindings, dtype=self.compute)
                    self.tasks = self.dyn.merged
                else:
                    self.tasks = model_tasks(source, self.target, self.layout, self.compute)
            except TiletuneError as e:
                ops = unsupported_operators(str(e))
                if ops:
                    raise Fallback(f"TVM's importer has no conversion for the operator{'s' * (len(ops) > 1)} "
                                   f"{', '.join(ops)}") from None
                raise Fallback(one_line(str(e), 300)) from None
        return self.tasks

    def build(self, tasks: ModelTasks | None = None) -> Built:
        """Compile the graph with the database's kernels and constructions for the rest (no measurement)."""
        t0 = time.perf_counter()
        tasks = tasks or self.import_tasks()
        keys = sorted(tasks.keys())
        state = self.db.state(keys, self.target)
        try:
            if self.symbolic:  # one library for every shape (tiletune.model.dynamic.shapes.dynamic_library)
                ids = {kernel_identity(k) for k in keys}
                recs = [r for r in self.db.records(self.target) if kernel_identity(r.workload) in ids]
                lib = dynamic_library(self.dyn, "the tuning database" if recs else None, self.opts.construct,
                                      read=recs or None)
                ex, recorded, chosen = lib.ex, lib.recorded, lib.chosen
                how = {f"{shape}: {k}": v for shape, kernels in lib.how.items() for k, v in kernels.items()}
            else:
                recorded = database_configs(tasks, {}, self.db)
                chosen = constructed_configs(tasks, self.opts.construct, recorded)
                mod, how = scheduled_module(tasks, chosen)
                ex = compile_module(mod, self.target)
        except TiletuneError as e:
            raise Fallback(one_line(str(e), 300)) from None
        module = ex.mod
        if self.cache is not None:
            module = self.cache.store(self.key, ex, {"tasks": keys, "state": state, "how": how,
                                                     "out_dtypes": self.plan.out_dtypes,
                                                     "tuned": len(recorded), "constructed": len(chosen) - len(recorded),
                                                     "graph": self.name, "target": self.target})
        return Built(module, keys, state, how, len(recorded), len(chosen) - len(recorded),
                     time.perf_counter() - t0)

    def cached(self) -> Built | None:
        """The cached build of this graph when the database still gives its tasks the same kernels, else None."""
        if self.cache is None:
            return None
        t0 = time.perf_counter()
        hit = self.cache.load(self.key)
        if hit is None:
            return None
        module, meta = hit
        if self.db.state(meta["tasks"], self.target) != meta["state"] or "out_dtypes" not in meta:
            return None  # the database has other kernels for it now: build again
        self.plan.out_dtypes = meta["out_dtypes"]
        return Built(module, meta["tasks"], meta["state"], meta.get("how", {}), meta.get("tuned", 0),
                     meta.get("constructed", 0), time.perf_counter() - t0, from_cache=True)


class Runner:
    """A compiled graph in Relax's VM: ``runner(*tensors)`` -> list of torch tensors (DLPack both ways)."""

    def __init__(self, module, plan: Plan, device):
        import tvm
        import tvm_ffi
        from tvm import relax

        self.dev = tvm.cuda(device.index or 0) if device.type == "cuda" else tvm.cpu()
        self.vm = relax.VirtualMachine(module, self.dev)
        self.main = self.vm["main"]
        self.plan = plan
        self._from = tvm_ffi.from_dlpack
        self._tensor_type = tvm.runtime.Tensor

    def __call__(self, tensors) -> list:
        import torch

        args = []
        for t in tensors:
            if not t.is_contiguous() or t.data_ptr() % PARAM_ALIGNMENT:
                t = t.contiguous() if t.data_ptr() % PARAM_ALIGNMENT == 0 else t.clone(
                    memory_format=torch.contiguous_format)
            args.append(self._from(t.detach()))
        out = self.main(*args)
        outs = [out] if isinstance(out, self._tensor_type) else list(out)
        return [torch.from_dlpack(o) for o in outs]


def relative_error(got: list, want: list) -> float:
    """The largest error of ``got`` against ``want`` (torch tensors) relative to the outputs' scale
    (``tiletune.model.build.compare``, in float64)."""
    import torch

    def host(ts):
        return [t.detach().to("cpu").to(torch.float64).numpy() if t.is_floating_point() else
                t.detach().to("cpu").numpy().astype(np.float64) for t in ts]

    return compare(host(got), host(want))


def tolerance(dtypes: list[str]) -> float:
    return max([RTOL.get(d, RTOL["float32"]) for d in dtypes] or [RTOL["float32"]])
