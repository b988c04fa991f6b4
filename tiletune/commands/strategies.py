"""tiletune strategies"""
from __future__ import annotations

from ..strategies import registry


def add_parser(sub) -> None:
    p = sub.add_parser("strategies", help="list the registered strategies and their options")
    p.set_defaults(func=run)


def run(args) -> int:
    for name, cls in registry().items():
        print(f"{name}: {cls.summary}")
        for o in cls.options:
            extra = f" one of {list(o.choices)}" if o.choices else ""
            print(f"    --option {name}.{o.name}=...  {o.help} (default {o.default}){extra}")
    return 0
