"""``python -m tiletune.torch_backend.tune_process SPEC``: the separate process of ``background`` mode
(``tiletune.torch_backend.background.main``), a module of its own so that running it does not run the package's
import of ``background`` twice."""
from __future__ import annotations

import sys

from .background import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
