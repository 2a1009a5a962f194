"""How faithfully the simulated NPU of tests/npu_sim computes what the CPU computes.

Runs PyTorch's own operator database (torch.testing._internal's OpInfo op_db) in float32 and
bfloat16 (--dtypes): for
each operator, its first two sample inputs, once on the CPU and once moved to the simulated
`npu`, then the gradients of every floating input that requires grad (of sum(0.5 * outputs)),
and compares outputs and gradients bit for bit (NaN where NaN). Random operators are left out.
Prints a markdown summary and writes it to bench/studies/npu_sim_opinfo.md (--results to change).

    PYTHONPATH=tests/npu_sim python -m bench.studies.npu_sim_opinfo

torch.testing._internal needs `expecttest` (pip install expecttest); the project does not.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch_npu
from torch.utils._pytree import tree_leaves, tree_map

RANDOM = (
    "bernoulli",
    "normal",
    "multinomial",
    "uniform",
    "empty",
    "new_empty",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "nn.functional.dropout",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu",
)


# Why an operator is not the same, where the reason is known.
WHY = {
    "as_strided.partial_views": "reads storage beyond its input view, which a copy to any device leaves behind",
    "tensor_split": "its index tensor must stay on the CPU (this script moves every tensor), on any device",
    "to": "non_blocking copies to the host need pinned memory, which PyTorch's Python backend cannot allocate",
    "to_sparse": "no sparse tensors on the simulated device",
    "nn.functional.linear_cross_entropy.chunked": "PyTorch picks the chunked path's accumulation by device type "
    "(linear_cross_entropy_options: cpu is 'accurate'): any other device gets another",
    "nn.functional.linear_cross_entropy.chunked_none": "as linear_cross_entropy.chunked",
    "sparse.mm.reduce": "no sparse tensors on the simulated device",
    "sparse.sampled_addmm": "no sparse tensors on the simulated device",
}


def bits(value: Any) -> Any:
    """A value to compare exactly: tensors on the CPU, complex as pairs, NaN as a fixed number."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    if value.is_complex():
        value = torch.view_as_real(value.resolve_conj())
    return value.nan_to_num(1234.5) if value.is_floating_point() else value


def same(tested: Any, cpu: Any) -> bool:
    a, b = bits(tested), bits(cpu)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    return bool(a == b)


def on_npu(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        return value.detach().to("npu").requires_grad_(value.requires_grad)
    return value


def gradients(outputs: list[Any], inputs: list[torch.Tensor]) -> list[Any]:
    differentiable = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    if not inputs or not differentiable:
        return []
    loss = sum((0.5 * torch.view_as_real(o) if o.is_complex() else 0.5 * o).sum() for o in differentiable)
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def check(info, dtype: torch.dtype) -> str:
    """'same', 'differs: ...', 'cpu only: ...' (the CPU runs it, the npu raises), or 'skipped'."""
    samples = list(info.sample_inputs("cpu", dtype, requires_grad=info.supports_autograd))[:2]
    verdict = "skipped"
    for sample in samples:
        args = (sample.input, *sample.args)
        try:  # a sample the CPU itself refuses says nothing, nor do gradients it cannot take
            cpu_out = tree_leaves(info(*args, **sample.kwargs))
            wanted = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad]
            cpu_grads = gradients(cpu_out, wanted)
        except Exception:  # noqa: BLE001
            continue
        npu_args, npu_kwargs = tree_map(on_npu, args), tree_map(on_npu, sample.kwargs)
        try:
            npu_out = tree_leaves(info(*npu_args, **npu_kwargs))
            if len(npu_out) != len(cpu_out) or not all(same(t, c) for t, c in zip(npu_out, cpu_out)):
                return "differs: outputs"
            npu_wanted = [t for t in tree_leaves(npu_args) if isinstance(t, torch.Tensor) and t.requires_grad]
            if not all(same(t, c) for t, c in zip(gradients(npu_out, npu_wanted), cpu_grads)):
                return "differs: gradients"
        except Exception as exc:  # noqa: BLE001 - the finding is that the npu raises
            return f"cpu only: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        verdict = "same"
    return verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated torch dtypes")
    parser.add_argument("--results", default=str(Path(__file__).with_name("npu_sim_opinfo.md")))
    options = parser.parse_args()
    assert "npusim" in torch_npu.__version__, "put tests/npu_sim first on PYTHONPATH"
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    lines = [
        "# The simulated NPU against the CPU on PyTorch's OpInfo database",
        "",
        f"`PYTHONPATH=tests/npu_sim python -m bench.studies.npu_sim_opinfo --dtypes {options.dtypes}`: "
        f"torch {torch.__version__}, Python {platform.python_version()}.",
    ]
    for dtype in (getattr(torch, name) for name in options.dtypes.split(",")):
        start = time.time()
        verdicts = {}
        for info in op_db:
            if info.name.startswith(RANDOM) or "rand" in info.name or dtype not in info.supported_dtypes("cpu"):
                continue
            torch.manual_seed(0)
            verdicts[info.name if info.variant_test_name == "" else f"{info.name}.{info.variant_test_name}"] = check(
                info, dtype
            )
        counts = {
            kind: sum(v.startswith(kind) for v in verdicts.values())
            for kind in ("same", "differs", "cpu only", "skipped")
        }
        lines += [
            "",
            f"## {dtype}",
            "",
            f"{len(verdicts)} operators (two samples each, outputs and gradients bit for bit, "
            f"{time.time() - start:.0f} s): {counts['same']} the same, {counts['differs']} differ, "
            f"{counts['cpu only']} raise on the npu only, {counts['skipped']} with no sample the CPU runs.",
            "",
            "| operator | on the simulated npu | why |",
            "|---|---|---|",
            *(
                f"| {name} | {verdict} | {WHY.get(name, '')} |"
                for name, verdict in sorted(verdicts.items())
                if verdict not in ("same", "skipped")
            ),
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(options.results).write_text(text)


if __name__ == "__main__":
    main()
