"""TVM's hand-written kernels in a model (sort, argsort, topk, cumsum and the other scans, scatter), and what a
kernel that fails to build says.

- Form: TVM writes these kernels with its IR builder (``DispatchSortScan`` for sort and scan, the ``topi``
  legalizations of topk and scatter_elements): the function's body is one opaque block (``cumsum_generic``,
  ``topk_cpu``) holding plain loops or a packed call, with no compute block inside. TVM's
  ``SplitLayoutRewritePreproc`` (``compile_module``'s weight prepacking, run over every kernel of the model)
  expects every statement under a kernel's root block to hold a block ("There should be a compute block if
  there is only one subtree under the root"), so a model with such a kernel did not compile, whatever its other
  kernels were. ``with_root_blocks`` gives each such kernel a root block around its body (the opaque block then
  is the root's one child, a compute block the pass accepts); the loops, their parallel annotation and the
  packed calls are unchanged, and the lowering removes both blocks as before. Chosen over running the prepack
  pass on the other kernels only: the module stays whole (its Relax calls keep every callee), and the kernel is
  valid TIR before and after.
- Failures: ``kernel_operators`` reads the operators of a kernel from its global name (TVM names a legalized
  kernel after its operator and a fused one ``fused_`` + its operators' names, each with an optional number),
  and ``reason`` turns TVM's error into one line without its internal check text (``Check failed: (...) is
  false:``, the error class), so that a refusal names the operators and the cause in words a user can act on.
  When the whole model's fusion fails, ``failing_operator`` runs it again on each operator call alone to find
  the one that fails (only then: the model's fusion itself runs once).
- Scatters: ``writes_by_index`` tells a kernel that stores where an index tensor says (scatter_elements,
  scatter_nd, and the kernels FuseOps joins them into); the default schedule's check does not run those on
  random inputs (random indices would write outside the output and bring the process down).
"""
from __future__ import annotations

import re

from ...errors import one_line


def _holds_block(stmt) -> bool:
    """Whether ``stmt`` holds an SBlock anywhere inside it (through sequences, loops, conditions and the other
    statements with a ``body``)."""
    from tvm import s_tir, tirx

    if isinstance(stmt, (s_tir.SBlockRealize, s_tir.SBlock)):
        return True
    if isinstance(stmt, tirx.SeqStmt):
        return any(_holds_block(s) for s in stmt.seq)
    subs = [getattr(stmt, a, None) for a in ("body", "then_case", "else_case")]
    return any(isinstance(s, tirx.Stmt) and _holds_block(s) for s in subs)


def needs_root(func) -> bool:
    """Whether a PrimFunc's root block holds a statement with no block in it (TVM's IR-builder kernels: see the
    module docstring)."""
    from tvm import s_tir, tirx

    body = getattr(func, "body", None)
    if not isinstance(body, s_tir.SBlockRealize):
        return False
    inner = body.block.body
    stmts = list(inner.seq) if isinstance(inner, tirx.SeqStmt) else [inner]
    return not all(_holds_block(s) for s in stmts)


def with_root_block(func):
    """``func`` with a root block (no iterators, reads or writes) around its body."""
    from tvm import s_tir, tirx

    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", func.body))
    return tirx.PrimFunc(func.params, root, func.ret_type, func.attrs)


def with_root_blocks(mod):
    """``mod`` with every kernel that ``needs_root`` given a root block (``with_root_block``); ``mod`` itself when
    none needs one."""
    import tvm

    fix = {gv: with_root_block(f) for gv, f in mod.functions.items()
           if isinstance(f, tvm.tirx.PrimFunc) and needs_root(f)}
    if not fix:
        return mod
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, f in fix.items():
        out[gv] = f
    return out


_OPS: list[str] | None = None


def _op_names() -> list[str]:
    """Relax's operator names without their namespace (``conv2d``, ``scatter_elements``), longest first."""
    global _OPS
    if _OPS is None:
        import tvm

        names = {str(n).rsplit(".", 1)[-1] for n in tvm.ir.Op.list_op_names() if str(n).startswith("relax.")}
        _OPS = sorted(names, key=len, reverse=True)
    return _OPS


def kernel_operators(name: str) -> list[str]:
    """The operators of the kernel named ``name`` (``fused_matmul_add`` -> matmul, add; ``scatter_elements1`` ->
    scatter_elements), read from the name as TVM forms it; a part that is no Relax operator is kept as it is."""
    rest = name[len("fused_"):] if name.startswith("fused_") else name
    out: list[str] = []
    ops = _op_names()
    while rest:
        hit = next((op for op in ops if re.match(re.escape(op) + r"\d*(_|$)", rest)), None)
        if hit is None:  # not an operator's name: the rest up to the next separator
            part, _, rest = rest.partition("_")
            out.append(re.sub(r"\d+$", "", part) or part)
            continue
        out.append(hit)
        rest = re.sub(r"^" + re.escape(hit) + r"\d*_?", "", rest)
    return list(dict.fromkeys(p for p in out if p))


def describe(name: str) -> str:
    """``kernel NAME (operators A, B)`` or ``kernel NAME (operator A)``."""
    ops = kernel_operators(name)
    what = f"operator{'s' if len(ops) > 1 else ''} {', '.join(ops)}" if ops else "no operator"
    return f"kernel {name} ({what})"


def reason(message: str, width: int = 240) -> str:
    """TVM's error ``message`` in one line, without its internal check text: the ``Check failed: (...) is
    false:`` condition and the error class are dropped, TVM's explanation kept."""
    line = one_line(message, 1000)
    line = re.sub(r"^.*?Check failed:\s*(\(.*?\)\s*is false|[^:]*?):\s*", "", line)
    line = re.sub(r"^(\w+\.)*\w*(Error|Exception):\s*", "", line)
    line = line.replace("Check failed", "check").strip() or "no message"
    return line[:width]


def _alone(call):
    """A module whose ``main`` runs the Relax ``call`` alone, its free variables as parameters."""
    from tvm import relax

    params = {v: relax.Var(str(v.name), v.ty) for v in relax.analysis.free_vars(call)}

    @relax.expr_functor.mutator
    class Rename(relax.PyExprMutator):
        def visit_var_(self, v):
            return params.get(v, v)

        def visit_dataflow_var_(self, v):
            return params.get(v, v)

    bb = relax.BlockBuilder()
    with bb.function("main", list(params.values())):
        with bb.dataflow():
            out = bb.emit_output(Rename().visit_expr(call))
        bb.emit_func_output(out)
    return bb.get()


#: the most distinct operator calls ``failing_operator`` tries alone
MAX_TRIED = 200


def failing_operator(mod, run) -> tuple[str, str] | None:
    """(operator, why in one line) of the first operator call of ``mod``'s Relax functions for which ``run`` (a
    module's fusion, say) fails on a module that holds that call alone, or None when each passes alone. Calls that
    differ in nothing but their variables are tried once; at most ``MAX_TRIED`` are tried. Used to say which
    operator a failure of the whole model's fusion comes from."""
    import tvm
    from tvm import relax

    seen: set = set()
    for f in mod.functions.values():
        if not isinstance(f, relax.Function):
            continue
        for block in getattr(f.body, "blocks", ()):
            for b in block.bindings:
                call = b.value
                if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
                    continue
                key = (str(call.op.name), tuple(str(getattr(a, "ty", type(a).__name__)) for a in call.args),
                       str(call.attrs))
                if key in seen:
                    continue
                seen.add(key)
                if len(seen) > MAX_TRIED:
                    return None
                try:
                    single = _alone(call)
                except Exception:  # noqa: BLE001  (a call this helper cannot stand alone: not tried)
                    continue
                try:
                    run(single)
                except Exception as e:  # noqa: BLE001
                    return str(call.op.name).rsplit(".", 1)[-1], reason(str(e))
    return None


def _statements(stmt):
    """``stmt`` and every statement inside it (sequences, loops, conditions, blocks and their inits, lets, attrs)."""
    from tvm import s_tir, tirx

    if stmt is None:
        return
    yield stmt
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from _statements(s)
        return
    if isinstance(stmt, s_tir.SBlockRealize):
        yield from _statements(stmt.block)
        return
    for attr in ("body", "then_case", "else_case", "init"):
        sub = getattr(stmt, attr, None)
        if isinstance(sub, (tirx.Stmt, s_tir.SBlock, s_tir.SBlockRealize)):
            yield from _statements(sub)


def writes_by_index(func) -> bool:
    """Whether ``func`` stores to a position that it reads from a tensor (a scatter: ``out[idx[i]] = v``). Such a
    kernel writes outside its output when its index tensor holds values the model never gives it (random test
    inputs), so ``tiletune.model.kernels.default_schedule.checked`` does not run it."""
    from tvm import tirx

    return any(isinstance(s, tirx.BufferStore) and any(_loads(i) for i in s.indices)
               for s in _statements(getattr(func, "body", None)))


def _loads(expr) -> bool:
    """Whether the TIR expression ``expr`` reads a tensor (a load anywhere inside it)."""
    if hasattr(expr, "indices") and hasattr(expr, "source"):
        return True
    subs = [getattr(expr, f, None) for f in ("a", "b", "value", "condition", "true_value", "false_value")]
    subs += list(getattr(expr, "args", None) or ())
    return any(_loads(x) for x in subs if x is not None and not isinstance(x, (int, float, str)))
