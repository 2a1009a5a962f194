"""Dumps outside the rootdir (an ini file elsewhere, `-c ci/pytest.ini`): each keeps its own rows."""

from __future__ import annotations

import shutil

from conftest import DUMPS, read_csv, run_msprobe


def test_dumps_outside_the_rootdir_write_each_their_own_rows(pytester):
    for rank, name in enumerate(("gpt512_fp32", "gpt512_bf16")):  # the same API call in both
        shutil.copytree(DUMPS[name], pytester.path / "dumps" / f"rank{rank}")
    ini = pytester.path / "ci" / "tox.ini"
    ini.parent.mkdir()
    ini.write_text("[pytest]\nmsprobe_standard = dtype\n")
    result = run_msprobe(pytester, pytester.path / "dumps", "-c", str(ini), "--msprobe-device", "recorded")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["msprobe: ../dumps/rank0/dump.json: pytorch tensor dump, *"])
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == ["rank0", "rank1"]
    for rank, dtype in ((0, "torch.float32"), (1, "torch.bfloat16")):
        rows = read_csv(pytester.path / "out" / f"rank{rank}", "result")
        assert [(r["API Name"], r["Forward Test Success"], r["Backward Test Success"]) for r in rows] == [
            ("Torch.softmax.31", "pass", "pass")
        ]
        details = read_csv(pytester.path / "out" / f"rank{rank}", "details")
        assert {d["Tested Dtype"] for d in details} == {dtype}
