"""The package's shape, checked: no import cycles between tiletune's modules, no strategy importing
another strategy, and project modules imported at the top of files (lazy imports are for tvm, torch,
xgboost and matplotlib, and for the `__main__` blocks of worker entry points)."""
import ast
from pathlib import Path

import tiletune
from tiletune.strategies.base import MODULES

ROOT = Path(tiletune.__file__).resolve().parent


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _resolve(name: str, node: ast.ImportFrom, is_package: bool) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = name.split(".") if is_package else name.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _imports(name: str, tree: ast.Module, known: set[str], top_only: bool) -> set[str]:
    is_package = (ROOT.parent / Path(*name.split(".")) / "__init__.py").exists()
    nodes = tree.body if top_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            cands = _resolve(name, node, is_package)
        elif isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        else:
            continue
        found |= {c for c in cands if c in known and c != name}
    return found


def test_no_import_cycles_at_module_level():
    mods = _modules()
    known = set(mods)
    graph = {n: _imports(n, t, known, top_only=True) for n, t in mods.items()}
    # a package's __init__ importing its own submodules is how packages re-export; not a cycle of concern
    for n in graph:
        graph[n] = {m for m in graph[n] if not (m.startswith(n + ".") or n.startswith(m + "."))}
    cycles, state = [], {}

    def visit(n, stack):
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, cycles


def test_no_strategy_imports_another():
    mods = _modules()
    strategies = {f"tiletune.strategies.{m}" for m in MODULES}
    for name in strategies:
        imported = _imports(name, mods[name], set(mods), top_only=False)
        assert not (imported & strategies), (name, imported & strategies)


def test_project_modules_imported_at_the_top():
    mods = _modules()
    known = set(mods)
    late = []
    for name, tree in mods.items():
        top = set(id(n) for n in tree.body)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                is_package = (ROOT.parent / Path(*name.split(".")) / "__init__.py").exists()
                cands = (_resolve(name, node, is_package) if isinstance(node, ast.ImportFrom)
                         else [a.name for a in node.names])
                if any(c in known for c in cands):
                    late.append(f"{name}:{node.lineno}")
    # worker entry points import their own module under its package name in `if __name__ == "__main__":`
    allowed = {"tiletune.measure.local"}
    late = [x for x in late if x.split(":")[0] not in allowed or not _in_main_block(mods, x)]
    assert not late, late


def _in_main_block(mods, where: str) -> bool:
    name, line = where.split(":")
    for node in mods[name].body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return node.lineno <= int(line) <= node.end_lineno
    return False
