"""``torch.compile(model, backend="tiletune", options={...})``: every graph dynamo hands over runs through the
project's model path (docs/torch.md).

The backend is registered through the ``torch_dynamo_backends`` entry point (pyproject.toml), so that
``backend="tiletune"`` works with no import; ``tiletune.torch_backend.compile(model, **options)`` (also
``tiletune.compile``) is the same thing.

- Each graph is compiled at its first call, on the real inputs (``CompiledGraph``): ``tiletune.torch_backend.graph``
  does one shape; a graph with symbolic sizes (``dynamic=True``, ``torch._dynamo.mark_dynamic``) is compiled once
  per shape it meets, at that shape's first call, up to ``max_shapes`` shapes (``Options``); the shapes after those run
  in PyTorch, with one line: recompilation is bounded. Compiled shapes come from the cache where the cache has them.
- Modes (``Options.mode``): ``construct`` (default: the tuning database's kernels, a construction for the others,
  no measurement), ``tune`` (the graph's tasks tuned into the database at its first call, under ``trials`` /
  ``seconds``, with the progress display; then built), ``background`` (built as ``construct``, then a separate
  process tunes the tasks into the database under the budget while the graph runs, and each time the database
  gives a task a better kernel the graph is built again and swapped in: ``tiletune.torch_backend.background``).
- A graph that cannot take the path runs in PyTorch; one line on stderr says which graph and why.
"""
from __future__ import annotations

import threading
import time
import weakref

from ..api import set_threads
from ..errors import TiletuneError, one_line
from .background import Background, tune_now
from .graph import COUNT, Fallback, GraphCompiler, _is_weight, Runner, relative_error, say, tolerance
from .options import Options

__all__ = ["backend", "compile", "compiled_graphs", "Options", "CompiledGraph"]

_GRAPHS: list = []  # weak references to the CompiledGraphs of this process, in the order dynamo made them


def compiled_graphs() -> list["CompiledGraph"]:
    """The graphs the backend was given in this process (those still alive), in order: ``g.shapes()`` says how each
    shape of each runs (compiled, or in PyTorch and why)."""
    return [g for g in (r() for r in _GRAPHS) if g is not None]


def backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """The dynamo backend: ``gm`` as a callable that runs it through tiletune (module docstring). ``mode`` (torch's
    ``mode=`` argument) is not used: tiletune's own modes are ``options={"mode": ...}``."""
    opts = Options.parse(options)
    set_threads()  # TVM's pool on every core, as load_model gives a library (before the pool starts)
    if mode not in (None, "default"):
        raise TiletuneError(f"torch.compile mode={mode!r} is inductor's; tiletune's modes are options={{'mode': "
                            "'construct' | 'tune' | 'background'}}")
    return CompiledGraph(gm, opts)


def compile(model, *, dynamic: bool | None = None, fullgraph: bool = False, **options):
    """``torch.compile(model, backend=tiletune's backend, options=options)``, with torch's ``dynamic`` and
    ``fullgraph``; options are checked here, before the first call."""
    import torch

    Options.parse(options)
    return torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph, options=options or None)


class _Entry:
    """One shape of a graph: its runner (None: it runs in PyTorch), the compiler that made it, its weights' ids."""

    def __init__(self, runner, compiler=None, reason: str = "", shared: bool = False):
        self.runner, self.compiler, self.reason = runner, compiler, reason
        self.shared = shared  # the graph's one library for every shape
        self.background: Background | None = None


class CompiledGraph:
    """The callable dynamo runs in place of ``gm`` (the module docstring)."""

    def __init__(self, gm, opts: Options):
        self.gm, self.opts = gm, opts
        self.number = next(COUNT)
        self.entries: dict[tuple, _Entry] = {}
        self.dynamic = any(n.op == "placeholder" and _is_symint(n) for n in gm.graph.nodes)
        self.lock = threading.Lock()
        self._sig_at: list[int] | None = None  # placeholder positions of the signature (user tensors, sizes)
        self.said_overflow = False
        self.symbolic: _Entry | None = None  # a dynamic graph's one library for every shape
        self.per_shape = False  # a dynamic graph whose library could not be made: compiled per shape
        _GRAPHS.append(weakref.ref(self))

    def shapes(self) -> list[tuple[str, str]]:
        """(the shape's inputs, "compiled" or "pytorch: WHY") of every shape the graph met."""
        out = []
        for sig, e in self.entries.items():
            shape = e.compiler.name.split(" ", 2)[-1] if e.compiler is not None else "?"
            if e.shared:  # the library's symbolic name: say the shape itself
                shape = "(" + ", ".join("x".join(map(str, p[0])) for p in sig if isinstance(p, tuple)) + ")"
            how = ("library" if e.shared else "compiled") if e.runner is not None else f"pytorch: {e.reason}"
            out.append((shape, how))
        return out

    def _signature(self, args) -> tuple:
        if not self.dynamic:
            return ()
        if self._sig_at is None:
            import torch

            self._sig_at = [i for i, (n, a) in enumerate(zip(_placeholders(self.gm), args))
                            if not (isinstance(a, torch.Tensor) and _weight(n, a))]
        out = []
        for i in self._sig_at:
            a = args[i]
            out.append((tuple(a.shape), a.dtype) if hasattr(a, "shape") else int(a))
        return tuple(out)

    def __call__(self, *args):
        sig = self._signature(args)
        entry = self.entries.get(sig)
        if entry is None:
            with self.lock:
                entry = self.entries.get(sig)
                if entry is None:
                    entry = self._compile(args, sig)
                    self.entries[sig] = entry
        if entry.runner is None:
            return tuple(self.gm(*args))
        c = entry.compiler
        if c.plan.consts and any((args[i].data_ptr(), args[i]._version) != ident
                                 for i, ident in zip(c.plan.consts, c.const_ids)):
            say(f"{c.name} runs in PyTorch from now on: its weights changed after it was compiled")
            for e in self.entries.values():  # every shape served by that build
                if e.compiler is c:
                    e.runner = None
            return tuple(self.gm(*args))
        runner = entry.runner
        return tuple(runner([args[i] for i in c.plan.user]))

    def _compile(self, args, sig) -> _Entry:
        self._t0 = time.perf_counter()  # the lines say how long the backend took (dynamo's tracing not counted)
        if self.dynamic and self.opts.mode == "construct" and self.opts.symbolic and not self.per_shape:
            shared = self.symbolic or self._symbolic(args)
            if shared is not None:
                if not self.opts.check or self._agrees(shared, args):
                    return _Entry(shared.runner, shared.compiler, shared=True)
                say(f"{shared.compiler.name}: its library differs from PyTorch at this shape: compiled per shape")
        compiled = sum(1 for e in self.entries.values() if e.compiler is not None and not e.shared)
        if self.dynamic and compiled >= self.opts.max_shapes:
            if not self.said_overflow:
                say(f"a dynamic graph met more than max_shapes={self.opts.max_shapes} shapes: the others run in "
                    "PyTorch (raise max_shapes to compile more)")
                self.said_overflow = True
            return _Entry(None, reason="max_shapes")
        try:
            c = GraphCompiler(self.gm, args, self.opts, number=self.number)
        except Fallback as e:
            say(f"graph {self.number} runs in PyTorch: {e}")
            return _Entry(None, reason=str(e))
        except Exception as e:  # noqa: BLE001  (whatever fails: the graph runs in PyTorch, nothing crashes)
            say(f"graph {self.number} runs in PyTorch: {type(e).__name__}: {one_line(str(e), 200)}")
            return _Entry(None, reason=str(e))
        try:
            built = c.cached() if self.opts.mode != "tune" else None
            if built is None:
                if self.opts.mode == "tune":
                    tune_now(c)
                built = c.build()
            try:
                runner = self._checked(c, built)
            except Exception:  # noqa: BLE001  (a cache entry that does not run or differs: built again)
                if not built.from_cache:
                    raise
                built = c.build()
                runner = self._checked(c, built)
        except Fallback as e:
            say(f"{c.name} runs in PyTorch: {e}")
            return _Entry(None, c, str(e))
        except Exception as e:  # noqa: BLE001
            say(f"{c.name} runs in PyTorch: {type(e).__name__}: {one_line(str(e), 200)}")
            return _Entry(None, c, str(e))
        if not self.opts.quiet:
            self._said(c, built)
        entry = _Entry(runner, c)
        if self.opts.mode == "background":
            entry.background = Background(c, entry, built)
            entry.background.start()
        return entry


    def _symbolic(self, args) -> _Entry | None:
        """The graph's one library for every shape (``GraphCompiler(symbolic=True)``), made at its first call; None
        (and the graph compiled per shape from then on) where it cannot be made."""
        try:
            c = GraphCompiler(self.gm, args, self.opts, number=self.number, symbolic=True)
            built = c.cached()
            if built is None:
                built = c.build()
            runner = self._checked(c, built)
        except Exception as e:  # noqa: BLE001  (NotSymbolic, Fallback, anything: the per-shape path decides)
            self.per_shape = True
            say(f"graph {self.number}: one library for every shape failed ({type(e).__name__}: "
                f"{one_line(str(e), 200)}); compiled per shape")
            return None
        if not self.opts.quiet:
            self._said(c, built)
        self.symbolic = _Entry(runner, c, shared=True)
        return self.symbolic

    def _agrees(self, shared: _Entry, args) -> bool:
        """Whether the shared library's outputs at these inputs are PyTorch's within the outputs' dtype tolerance."""
        import torch

        c = shared.compiler
        with torch.no_grad():
            want = self.gm(*args)
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        try:
            got = shared.runner([args[i] for i in c.plan.user])
        except Exception:  # noqa: BLE001  (a shape the library refuses)
            return False
        return relative_error(got, want) <= tolerance(c.plan.out_dtypes)

    def _said(self, c, built) -> None:
        what = f"from the cache in {built.seconds:.2f} s" if built.from_cache else f"compiled in {built.seconds:.1f} s"
        default = sum(1 for h in built.how.values() if h.startswith("default"))
        say(f"{c.name}: {what}, ready in {time.perf_counter() - self._t0:.2f} s; kernels: {built.tuned} from the "
            f"tuning database, {built.constructed} constructed ({self.opts.construct}), {default} with the default "
            "schedule")

    def _checked(self, c, built):
        """The runner of ``built``; with the ``check`` option, a Fallback when its outputs on the graph's first
        inputs differ from PyTorch's by more than the outputs' dtype allows (``build.RTOL``)."""
        runner = Runner(built.module, c.plan, c.example_in[0].device if c.example_in else _cpu())
        if self.opts.check and not built.from_cache:  # an entry was checked when it was built (same graph, weights)
            err = relative_error(runner(c.example_in), c.example_out)
            allowed = tolerance(c.plan.out_dtypes)
            if not err <= allowed:
                raise Fallback(f"its compiled outputs differ from PyTorch's by {err:.3g} (allowed {allowed:g})")
        return runner


def _placeholders(gm) -> list:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _is_symint(node) -> bool:
    import torch

    return isinstance(node.meta.get("example_value"), torch.SymInt) or "SymInt" in str(node.type)


def _weight(node, value) -> bool:
    return _is_weight(node, value)


def _cpu():
    import torch

    return torch.device("cpu")
