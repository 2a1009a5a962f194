"""What msprobe's own metrics cost a run: `--msprobe-csv-layout msprobe-pytorch` computes them for
every output (judging/msprobe_metrics.py), the default layout never.

    python -m bench.timing.msprobe_metrics_cost [--dumps gpt_fp32,gpt_bf16,llama_fp32,cnn_fp32] [--elements 4194304]

Per dump (tests/data, `--msprobe-device cpu`, serial, one fresh process each): the CPU time spent
inside msprobe_metrics() against the CPU time of the whole run in that process (both
time.process_time(), every thread of the process). Then the metrics alone on synthetic outputs of
`--elements` elements, fp32 and bf16 (the bf16 device output is held in float32, the bench cast to
it): CPU ns an element, beside the default metrics (judging/compare.metrics) on the same arrays.
Prints a markdown table; the results are kept in bench/timing/results_msprobe_metrics.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one_run(dump: Path, out: Path) -> dict[str, float]:
    """The run on one dump, in this process, msprobe_metrics() timed."""
    import pytest

    import pytest_msprobe.checking.check as check

    spent = {"metrics": 0.0, "outputs": 0}
    original = check.msprobe_metrics

    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent["metrics"] += time.process_time() - start
            spent["outputs"] += 1

    check.msprobe_metrics = timed
    start = time.process_time()
    pytest.main(
        ["-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--msprobe-dump", str(dump), "--msprobe-device", "cpu",
         "--msprobe-csv-layout", "msprobe-pytorch", "--msprobe-out", str(out)]
    )  # fmt: skip
    spent["run"] = time.process_time() - start
    return spent


def synthetic(elements: int) -> list[tuple[str, float, float]]:
    import numpy as np

    from pytest_msprobe.judging.compare import metrics
    from pytest_msprobe.judging.msprobe_metrics import msprobe_metrics

    rng = np.random.default_rng(0)
    bench = rng.standard_normal(elements)
    rows = []
    for dtype, held in (("torch.float32", np.float32), ("torch.bfloat16", np.float32)):
        tested = (bench * (1 + 1e-3 * rng.standard_normal(elements))).astype(held).astype(np.float64)
        if dtype == "torch.bfloat16":  # bf16's values: float32 with its low 16 bits cleared
            tested = (tested.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)
        start = time.process_time()
        metrics(tested, bench)
        default = time.process_time() - start
        start = time.process_time()
        msprobe_metrics(tested, bench, dtype)
        ours = time.process_time() - start
        rows.append((dtype, default / elements * 1e9, ours / elements * 1e9))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dumps", default="gpt_fp32,gpt_bf16,llama_fp32,cnn_fp32")
    parser.add_argument("--elements", type=int, default=1 << 22)
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        with tempfile.TemporaryDirectory() as out:
            found = one_run(args.one, Path(out))
        print(json.dumps(found), file=sys.stderr)
        return
    print("| dump | outputs | msprobe_metrics CPU | the run's CPU | share |")
    print("|---|---|---|---|---|")
    for name in args.dumps.split(","):
        dump = ROOT / "tests" / "data" / name / "dump.json"
        ran = subprocess.run(
            [sys.executable, "-m", "bench.timing.msprobe_metrics_cost", "--one", str(dump)],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        found = json.loads(ran.stderr.strip().splitlines()[-1])
        share = 100 * found["metrics"] / found["run"]
        print(f"| {name} | {found['outputs']} | {found['metrics']:.3f} s | {found['run']:.2f} s | {share:.1f}% |")
    print()
    print(f"| {args.elements:,} elements | default metrics, CPU ns an element | msprobe metrics, CPU ns an element |")
    print("|---|---|---|")
    for dtype, default, ours in synthetic(args.elements):
        print(f"| {dtype} | {default:.1f} | {ours:.1f} |")


if __name__ == "__main__":
    main()
