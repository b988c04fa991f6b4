"""fast_tvmscript_parsing: the same answers from inspect.getmodule, and TVMScript still parses."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

from tiletune.tvmscript import fast_tvmscript_parsing

PROBE = """
import inspect, json, sys
from tiletune.tvmscript import fast_tvmscript_parsing
frame = sys._getframe()
before = [inspect.getmodule(frame, "<frozen importlib._bootstrap>"), inspect.getmodule(json.dumps).__name__,
          inspect.getmodule(frame).__name__]
fast_tvmscript_parsing()
fast_tvmscript_parsing()
after = [inspect.getmodule(frame, "<frozen importlib._bootstrap>"), inspect.getmodule(json.dumps).__name__,
         inspect.getmodule(frame).__name__]
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("b"):
            vi = T.axis.spatial(4, i)
            b[vi] = a[vi] + T.float32(1)

print(json.dumps({"before": before, "after": after, "installed_once": inspect.getmodule._tiletune_fast,
                  "parsed": "a[vi] + T.float32(1.0)" in add_one.script()}))
"""


def test_getmodule_answers_the_same_and_tvmscript_parses(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    out = subprocess.run([sys.executable, str(tmp_path / "probe.py")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["before"] == r["after"] == [None, "json", "__main__"]
    assert r["installed_once"] is True and r["parsed"] is True


def test_installing_twice_keeps_one_wrapper():
    orig = inspect.getmodule
    try:
        fast_tvmscript_parsing()
        first = inspect.getmodule
        fast_tvmscript_parsing()
        assert inspect.getmodule is first and getattr(first, "_tiletune_fast", False)
        assert inspect.getmodule(sys._getframe(), "<frozen x>") is None
        assert inspect.getmodule(json.dumps) is json
    finally:
        inspect.getmodule = orig
