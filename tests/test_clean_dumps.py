"""Clean dumps of other model families give no error under the dtype standard (issue 27).

llama_* and moe_* (make/llama_dump.py) were written by msprobe 26.2.0 from a correct step on the CPU:
a LLaMA-style decoder (RMSNorm written out, RoPE at positions 4000+, GQA, SDPA, SwiGLU, z-loss) and a
top-2 MoE block, in fp32, bf16 and fp16 (loss-scaled). Every error there would be a false one, which
a CI gate must not raise: bench/studies/clean_dumps.md measures them over every clean dump.
"""

from __future__ import annotations

import re

import pytest

from conftest import read_csv, run_msprobe

CLEAN = {"llama_fp32": 94, "llama_bf16": 94, "llama_fp16": 94, "moe_bf16": 78, "moe_fp16": 78}  # APIs each
VERDICTS = ("Forward Test Success", "Backward Test Success")


@pytest.mark.slow
@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_the_clean_llama_and_moe_dumps_have_no_error(pytester, copy_dump, device):
    dumps = [copy_dump(name) for name in CLEAN]
    result = run_msprobe(pytester, dumps, "--msprobe-standard", "dtype", device=device)
    failed = [line for line in result.outlines if line.startswith("FAILED")]
    assert result.ret == 0 and not failed, failed or result.stdout.str()[-3000:]
    errors = [int(n) for n in re.findall(r"(\d+) error", result.stdout.str())]
    assert errors and not any(errors)  # the terminal summary says 0 error
    for name, apis in CLEAN.items():
        rows = read_csv(pytester.path / "out" / name, "result")
        assert len(rows) == apis, name  # no row lost
        statuses = {row[column] for row in rows for column in VERDICTS}
        assert "error" not in statuses and "pass" in statuses, name
    if device == "recorded":  # the GEMMs' gradients msprobe took through a view are SKIPs that say so
        details = read_csv(pytester.path / "out" / "llama_bf16", "details")
        q = [row for row in details if row["API Name"].startswith("Functional.linear.0.backward.")]
        assert q and all(row["Status"] == "SKIP" and "through a view, bit for bit" in row["Message"] for row in q)
