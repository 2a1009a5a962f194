"""The dtype standard on the correct fp32 CPU kernels of the public ResNet-50 step: long sums, batch
statistics, pooling windows, which the GPT dumps of kernel_bounds.py do not have.

Each entry runs as the plugin runs it (`PyTorch().run`: random mode, the inputs drawn to the dump's
statistics with the plugin's seed; cpu mode, so the tested side is PyTorch's fp32 CPU kernel, a
correct one). Each output is read by the plugin's budget (`budget.read`): its verdict and ratio
under the rule, and the constant each addition needs there: c_acc over the model's magnitude alone
(batch_norm's formula, pooling's routes; no spread), c_length over `u sqrt(K) |b|` beyond the rest of
the rule (conv, a norm's weight and bias gradients). Every output is a correct kernel's: it must pass.

    python -m bench.studies.resnet_kernels [--dump PATH] [--apis conv2d,batch_norm,max_pool2d] [--every N]

prints a markdown table (about ten minutes for every conv2d, batch_norm and max_pool2d backward
entry on two cores) and writes it into bench/studies/resnet_kernels.md (--results to change).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from pytest_msprobe.dumps.dump import parse_entry_name, read_dump
from pytest_msprobe.frameworks import OutputPair, RunOptions, Tested
from pytest_msprobe.frameworks.magnitudes import family
from pytest_msprobe.frameworks.pytorch import PyTorch
from pytest_msprobe.judging.standards.budget import U_ACC, Constants, format_of, read

ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "tests" / "data" / "public" / "gpu_resnet" / "dump.json"
SEED = 1234  # the plugin's default


def need(error: np.ndarray, rest: np.ndarray, term: np.ndarray) -> float:
    """The smallest c with error_i <= rest_i + c term_i at every element (inf where term_i is 0)."""
    excess = np.maximum(error - rest, 0.0)
    if not (excess > 0).any():
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(excess > 0, excess / term, 0.0)
    return float(np.nan_to_num(ratio, nan=math.inf).max())


def readings(pair: OutputPair, api: str) -> dict[str, str]:
    fmt = format_of(pair.tested_dtype)
    assert fmt is not None and pair.tested is not None and pair.bench is not None
    tested, bench, extra = pair.tested.astype(np.float64), pair.bench.astype(np.float64), pair.extra
    now = read(tested, bench, fmt, extra)
    error = np.abs(tested - bench)
    unit = fmt.spacing(bench)
    found = {"now": f"{now.status(Constants().band)} {now.ratio:.3g}"}
    terms = extra.terms()
    magnitude = extra.magnitude() if family(api) in ("formula", "routes") else None  # the models studied here
    if magnitude is not None:
        found["c_acc over the model"] = f"{need(error, 1.5 * unit, U_ACC * np.maximum(np.abs(bench), magnitude)):.3g}"
    if terms:
        m = extra.lower_magnitude()
        m = extra.magnitude() if m is None else m
        rest = 1.5 * unit + 32 * U_ACC * (np.abs(bench) if m is None else np.maximum(np.abs(bench), m))
        found["c_length"] = f"{need(error, rest, U_ACC * math.sqrt(terms) * np.abs(bench)):.3g}"
    found["K"] = str(terms or "")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=DUMP)
    parser.add_argument("--apis", default="conv2d,batch_norm,max_pool2d")
    parser.add_argument("--every", type=int, default=1, help="every Nth entry of each API")
    parser.add_argument("--results", type=Path, default=Path(__file__).with_suffix(".md"))
    options = parser.parse_args(argv)
    apis = options.apis.split(",")
    dump = read_dump(options.dump)
    run_options = RunOptions("cpu", Tested.DEVICE, "random", SEED)
    rows = [
        "| entry | output | shape | K | verdict, ratio | c_acc over the model | c_length |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    started = time.perf_counter()
    seen: dict[str, int] = {}
    verdicts: list[str] = []
    needs: dict[tuple[str, str], float] = {}  # (api, constant) -> the most any output needs
    for full in dump.entries:
        name = parse_entry_name(full)
        if name is None or name.direction != "backward" or name.api not in apis:
            continue
        seen[name.api] = seen.get(name.api, 0) + 1
        if (seen[name.api] - 1) % options.every:
            continue
        run = PyTorch().run(dump, name, run_options)
        for pair in run.pairs:
            if pair.skip or pair.tested is None:
                continue
            found = readings(pair, name.api)
            verdicts.append(found["now"].split()[0])
            for constant in ("c_acc over the model", "c_length"):
                if constant in found:
                    key = (name.api, constant)
                    needs[key] = max(needs.get(key, 0.0), float(found[constant]))
            rows.append(
                f"| {full} | {pair.index} | {pair.shape} | {found['K']} | {found['now']} "
                f"| {found.get('c_acc over the model', '')} | {found.get('c_length', '')} |"
            )
            print(rows[-1], flush=True)
    text = (
        f"# The dtype standard on the ResNet step's correct fp32 CPU kernels\n\n"
        f"`python -m bench.studies.resnet_kernels --apis {options.apis} --every {options.every}` "
        f"(torch {torch.__version__}, {torch.get_num_threads()} threads, {time.perf_counter() - started:.0f} s), "
        f"on {options.dump.relative_to(ROOT) if options.dump.is_relative_to(ROOT) else options.dump}: "
        "cpu mode, random inputs (seed 1234), backward entries, the rule of budget.py. Every output is a "
        "correct kernel's: it must pass. The ratio is the reading's: an output that passes reports the "
        "first answers that sufficed (the strict check, K, the float32 magnitude), not all of them.\n\n"
        f"{len(verdicts)} outputs: "
        + ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts)))
        + ". "
        + "The most any output needs: "
        + "; ".join(f"{api} {constant} {value:.3g}" for (api, constant), value in sorted(needs.items()))
        + " (the rule: c_acc 32, c_length 2).\n\n"
        + "\n".join(rows)
        + "\n"
    )
    options.results.write_text(text)
    print(f"\nwritten to {options.results}")


if __name__ == "__main__":
    main()
