"""Where msprobe recorded a gradient: how close the right float64 gradient is, and how far the others.

For every backward entry of the PyTorch tensor dumps in the repository, each recorded
gradient is compared (relative L2 distance, float64) with every float64 gradient of its
shape: the call's input gradients and the gradient each node of its graph passes on
(frameworks/recorded_gradients.py). The nearest is the place it was recorded at; the
next distinct one is how far a wrong place would be. FIT must sit between the two.

    python -m bench.studies.gradient_attribution [--dumps DIR ...]

prints a markdown table and writes it to bench/studies/gradient_attribution.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from pytest_msprobe.dumps.dump import read_dump
from pytest_msprobe.frameworks import pytorch, recorded_gradients
from pytest_msprobe.frameworks import torch_engine as engine
from pytest_msprobe.inputs.rebuild import Rebuilder, is_tensor_spec

ROOT = Path(__file__).resolve().parents[2]
DUMPS = [
    ROOT / "examples" / "pt_tensor_L1",
    *sorted(p for p in (ROOT / "tests" / "data").iterdir() if p.name.startswith(("pt_tensor", "gpt"))),
]


def distances(dump_dir: Path):
    """(entry, position, shape, dtype, sorted distinct distances to its candidates) per recorded gradient."""
    dump = read_dump(dump_dir / "dump.json")
    for name in dump.api_names():
        if name.direction != "backward" or name.api_type not in ("Functional", "Torch", "Tensor"):
            continue
        try:
            call = pytorch.build_call(dump, name, pytorch.resolve(name, True, "cpu"), "real", 0)
            if pytorch.returns_its_input(call):
                continue  # a no-op cast: its gradients belong to other calls (a SKIP)
            body = dump.entries[name.full]
            grads_in = Rebuilder(engine.CODEC, name.full, dump.tensor_dir, "real", 0).rebuild(body, "input", "").args
            specs = engine.flat_specs(body.get("output", []))
            shapes = {tuple(s["shape"]) for s in specs if is_tensor_spec(s)}
            nodes: list = []

            def watch(outs: list, leaves: list, shapes: set = shapes, nodes: list = nodes) -> None:
                engine.watch_graph(outs, leaves, shapes, nodes)

            bench = engine.gradients(engine.Side("cpu", torch.float64), call, grads_in, watch)
            values = engine.recorded_values(engine.CODEC, dump, name.full, specs, "output")
        except Exception:  # noqa: BLE001 - an entry the plugin SKIPs anyway
            continue
        passed_on = [g for g in engine.flat_outputs(grads_in) if isinstance(g, torch.Tensor)]
        for position, (value, spec) in enumerate(zip(values, specs)):
            if value is None or spec is None or any(recorded_gradients.same_values(value, g) for g in passed_on):
                continue
            candidates = recorded_gradients.candidates_of(position, list(value.shape), bench, nodes, {})
            found = sorted(recorded_gradients.distance(value, c.value) for c in candidates)
            distinct = [d for i, d in enumerate(found) if i == 0 or d > found[i - 1] * (1 + 1e-9) + 1e-12]
            yield name.full, position, list(value.shape), str(value.dtype).replace("torch.", ""), distinct


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs="*", type=Path, default=DUMPS)
    parser.add_argument("--results", type=Path, default=Path(__file__).with_suffix(".md"))
    args = parser.parse_args(argv)
    nearest, second = [], []
    for dump_dir in args.dumps:
        for entry, position, _, dtype, found in distances(dump_dir):
            if not found:
                continue
            nearest.append((found[0], dump_dir.name, entry, position, dtype))
            if len(found) > 1:
                second.append((found[1], dump_dir.name, entry, position, dtype))
    nearest.sort(reverse=True)
    second.sort()
    lines = [
        "# Where msprobe recorded a gradient: the distances FIT sits between",
        "",
        f"`python -m bench.studies.gradient_attribution` over {', '.join(d.name for d in args.dumps)}: "
        f"{len(nearest)} recorded gradients (passed-on grad_outputs and no-op casts left out), "
        f"{len(second)} of them with a second, distinct float64 gradient of their shape.",
        "",
        "Relative L2 distance ||recorded - g|| / ||g||, g in float64: the nearest g is where the gradient was",
        "recorded (a correct kernel's rounding apart); the next distinct g is what a wrong place would be.",
        "",
        "| | distance | dump | entry | recorded item | dtype |",
        "|---|---:|---|---|---:|---|",
    ]
    lines += [f"| nearest, largest | {d:.3g} | {dump} | {entry} | {p} | {t} |" for d, dump, entry, p, t in nearest[:6]]
    lines += [f"| second, smallest | {d:.3g} | {dump} | {entry} | {p} | {t} |" for d, dump, entry, p, t in second[:6]]
    worst, gap = nearest[0][0], second[0][0] if second else float("inf")
    lines += [
        "",
        f"Every recorded gradient is within {worst:.3g} of its place; two different gradients of one shape are "
        f"{gap:.3g} or more apart. FIT = {recorded_gradients.FIT} sits between them "
        f"({recorded_gradients.FIT / worst:.1f}x the largest, {gap / recorded_gradients.FIT:.1f}x below the smallest).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
