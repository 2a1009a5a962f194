"""`python -m pytest_msprobe.merge OUT_DIR... --out DIR`: the shards' CSV pairs joined (reports/merge.py)."""

from __future__ import annotations

import sys

from .reports.merge import main

if __name__ == "__main__":
    sys.exit(main())
