"""Metrics and verdicts: an output beside its float64 benchmark, judged by a standard.

Takes numpy arrays; hands on `Metrics` and `Verdict`. Knows no framework and no pytest.
"""
