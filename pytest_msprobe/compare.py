"""`python -m pytest_msprobe.compare --npu A --gpu B -o OUT`: msprobe's api_precision_compare of two runs
(reports/compare.py, its rules in judging/precision_compare.py)."""

from __future__ import annotations

import sys

from .reports.compare import main

if __name__ == "__main__":
    sys.exit(main())
