"""Intra-op threads on an LLM-width layer's GEMMs (issue 32): do they scale, and are the bits the same?

The plugin runs each process that checks entries at one intra-op thread (frameworks/devices.py,
cpu_threads), so that a row never depends on the thread count; OMP_NUM_THREADS set by the user wins.
This measures what that choice costs on the work that dominates an LLM-width check: the float64
benchmark's and the float32 tested side's GEMMs of llama7b's linear shapes at seq 1024 (the q/o
projection 4096 -> 4096 and the MLP's down projection 11008 -> 4096), forward `F.linear(x, W)`, the
input's gradient `g @ W` and the weight's `g^T @ x`, each run at every thread count in turn, --repeats
rounds, on the same inputs. Per GEMM: whether every thread count gave the output of one thread to the
bit, the least CPU (process_time: every thread) and wall seconds per count, and the wall speed-up.

    python -m bench.llm_width.threads [--threads 1 2] [--repeats 2] [--results bench/llm_width/results_threads.md]

Run it on an idle machine: with other processes on the cores, a second thread gets no core of its own
and the speed-up reads 1.0x whatever the kernel does.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

SEQ = 1024
SHAPES = {"q_proj 4096->4096": (4096, 4096), "down 11008->4096": (11008, 4096)}  # (fan_in, fan_out)


@dataclass
class Row:
    dtype: str
    shape: str
    gemm: str
    same_bits: bool
    max_abs_diff: float
    cpu: dict[int, float]  # threads -> least CPU seconds
    wall: dict[int, float]  # threads -> least wall seconds

    def line(self, threads: Sequence[int]) -> str:
        first = threads[0]
        times = " | ".join(f"{self.cpu[n]:.2f} / {self.wall[n]:.2f}" for n in threads)
        speedups = " | ".join(f"{self.wall[first] / self.wall[n]:.2f}x" for n in threads[1:])
        what = f"{self.dtype} | {self.shape} | {self.gemm} | {'yes' if self.same_bits else 'no'}"
        return f"| {what} | {self.max_abs_diff:.3g} | {times} | {speedups} |"


def gemms(dtype: torch.dtype, fan_in: int, fan_out: int) -> dict[str, Callable[[], torch.Tensor]]:
    x = torch.randn(SEQ, fan_in, dtype=dtype)
    w = torch.randn(fan_out, fan_in, dtype=dtype) * 0.02
    g = torch.randn(SEQ, fan_out, dtype=dtype)
    return {
        "forward x W^T": lambda: torch.nn.functional.linear(x, w),
        "input grad g W": lambda: g.mm(w),
        "weight grad g^T x": lambda: g.t().mm(x),
    }


def measure(fn: Callable[[], torch.Tensor], threads: Sequence[int], repeats: int) -> tuple[dict, dict, dict]:
    """(output, least CPU, least wall) by thread count; a count that repeats must repeat its bits."""
    outputs: dict[int, torch.Tensor] = {}
    cpu: dict[int, float] = {n: float("inf") for n in threads}
    wall: dict[int, float] = {n: float("inf") for n in threads}
    for _ in range(repeats):
        for n in threads:
            torch.set_num_threads(n)
            c0, w0 = time.process_time(), time.perf_counter()
            out = fn()
            cpu[n], wall[n] = min(cpu[n], time.process_time() - c0), min(wall[n], time.perf_counter() - w0)
            if n in outputs:
                assert torch.equal(outputs[n], out), f"{n} threads gave other bits on a second run"
            outputs[n] = out
    return outputs, cpu, wall


def run(threads: Sequence[int], repeats: int) -> list[Row]:
    torch.manual_seed(0)
    rows = []
    for dtype in (torch.float64, torch.float32):
        for shape, (fan_in, fan_out) in SHAPES.items():
            for name, fn in gemms(dtype, fan_in, fan_out).items():
                outputs, cpu, wall = measure(fn, threads, repeats)
                one = outputs[threads[0]]
                same = all(torch.equal(one, outputs[n]) for n in threads[1:])
                diff = max((one - outputs[n]).abs().max().item() for n in threads[1:]) if len(threads) > 1 else 0.0
                row = Row(str(dtype).removeprefix("torch."), shape, name, same, diff, cpu, wall)
                print(row.line(threads), flush=True)
                rows.append(row)
    return rows


def header(threads: Sequence[int]) -> str:
    times = " | ".join(f"{n} thread(s) CPU / wall s" for n in threads)
    speedups = " | ".join(f"wall {threads[0]} / {n}" for n in threads[1:])
    cells = 5 + len(threads) + len(threads) - 1
    return f"| dtype | shape | GEMM | same bits | max abs diff | {times} | {speedups} |\n|" + "---|" * cells


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--results", default=str(Path(__file__).with_name("results_threads.md")))
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    print(header(args.threads), flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = run(args.threads, args.repeats)
    load_after = os.getloadavg()
    print(f"1-minute load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    if args.results:
        with open(args.results, "a", encoding="utf-8") as out:
            out.write(
                f"\n## {started}: threads {' '.join(map(str, args.threads))}, {args.repeats} rounds\n\n"
                f"`python -m bench.llm_width.threads --threads {' '.join(map(str, args.threads))} "
                f"--repeats {args.repeats}`; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                f"torch {torch.__version__}, MKL {torch.backends.mkl.is_available()}; 1-minute load average "
                f"{load_before[0]:.2f} before, {load_after[0]:.2f} after.\n\n"
                + header(args.threads)
                + "\n"
                + "\n".join(row.line(args.threads) for row in rows)
                + "\n"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
