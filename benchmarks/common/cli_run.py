"""The benchmarks' way to run a tiletune command: in its own process (so that each tuning run and each timing
starts from a clean interpreter), printed first, failing loudly."""
from __future__ import annotations

import subprocess
import sys


def tiletune(*args: str) -> None:
    print("$ tiletune " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "tiletune.cli", *args], check=True)
