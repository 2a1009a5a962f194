"""msprobe 26.2.0's own metric cells of synthetic outputs: run by msprobe's environment's python
(tests/test_msprobe_metrics.py), never imported by the plugin's tests.

    python msprobe_metrics_oracle.py CASES.npz CASES.json OUT.json

CASES.json lists the cases ({"dtype", "kind", "api", "fp8_input"}); CASES.npz holds case i's
`tested_i` and `bench_i` (float64 values of the tested dtype and of msprobe's bench dtype, or
integers). Each case goes through the code acc_check runs for it, and OUT.json holds its 17 metric
cells as acc_check writes them (`"{:.14f}"` for a Python or float64 number, str() for the rest):

- "tensor": Comparator._compare_torch_tensor on torch tensors (the device output in the tested
  dtype, the bench in msprobe's: fp16/bf16 raised to float32, fp32 to float64);
- "builtin": Comparator._compare_builtin_type on Python values;
- "ulp": UlpCompare on float64 arrays (msprobe holds no fp8 tensor in numpy itself).
"""

import json
import sys

import numpy as np
import torch
from msprobe.pytorch.api_accuracy_checker.common.config import msCheckerConfig
from msprobe.pytorch.api_accuracy_checker.compare.compare import Comparator
from msprobe.pytorch.api_accuracy_checker.compare.compare_column import CompareColumn
from msprobe.pytorch.api_accuracy_checker.compare.compare_input import CompareInput
from msprobe.pytorch.api_accuracy_checker.precision_standard.ulp_compare import UlpCompare

BENCH = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}


def written(item):
    """_get_acc_check_detail's formatting, then the csv module's str()."""
    return "{:.{}f}".format(item, msCheckerConfig.precision) if isinstance(item, float) else str(item)


def cells(column, status, message):
    return [written(item) for item in column.to_column_value(status, message)[3:20]]


def tensor_case(comparator, case, tested, bench):
    dtype = getattr(torch, case["dtype"].removeprefix("torch."))
    device = torch.from_numpy(tested).to(dtype)
    golden = torch.from_numpy(bench).to(BENCH.get(dtype, dtype))
    column = CompareColumn()
    status, column, message = comparator._compare_torch_tensor(case["api"], golden, device, column, case["fp8_input"])
    return cells(column, status, message), status


def builtin_case(case, tested, bench):
    kind = {"int": int, "float": float, "bool": bool}[case["dtype"]]
    status, column, message = Comparator._compare_builtin_type(kind(bench.item()), kind(tested.item()), CompareColumn())
    return cells(column, status, message), status


def ulp_case(case, tested, bench):
    column = CompareColumn()
    dtype = getattr(torch, case["dtype"].removeprefix("torch."))
    UlpCompare(CompareInput(bench.astype(np.float64), tested.astype(np.float64), column, dtype)).compare()
    return cells(column, "pass", ""), "pass"


def main(npz, listing, out):
    arrays = np.load(npz)
    with open(listing) as handle:
        cases = json.load(handle)
    comparator = Comparator.__new__(Comparator)  # its __init__ writes CSV files; the registry is all it needs
    comparator.registry = comparator._register_compare_func()
    found = []
    for i, case in enumerate(cases):
        tested, bench = arrays[f"tested_{i}"], arrays[f"bench_{i}"]
        if case["kind"] == "tensor":
            row, status = tensor_case(comparator, case, tested, bench)
        elif case["kind"] == "builtin":
            row, status = builtin_case(case, tested, bench)
        else:
            row, status = ulp_case(case, tested, bench)
        found.append({"cells": row, "status": status})
    with open(out, "w") as handle:
        json.dump(found, handle)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main(*sys.argv[1:4])
