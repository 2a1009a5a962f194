"""What msprobe 26.2.0's own acc_check chooses on the held-out dumps (issue 45's check), from the rows of
its own result CSV (run on the CPU through ../../../../bench/timing/msprobe_cpu_acc_check.py):

- tests/data/ssm_fp32/acc_check/selection.json, `listed`: the calls it checks on ssm_fp32 under
  acc_check/config.json's white and black lists (`-config`); it writes a row `API <api> in black list or
  not in white list. SKIP.` for each other call (about a minute and a half on a loaded 2-core machine);
- tests/data/ssm_stats/acc_check/selection.json, `filtered`: the calls it checks on ssm_stats with `-f`
  (`--filter_api`) and no config (about seven minutes).

    python ssm_msprobe.py SHIM   (in msprobe's venv; SHIM: the path of msprobe_cpu_acc_check.py)
"""

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent
LEFT_OUT = "in black list or not in white list. SKIP."


def rows(shim, dump, *args):
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, shim, "acc_check", "-api_info", str(dump / "dump.json"), "-o", out, *args]
        subprocess.run(command, check=True, capture_output=True)
        (result,) = Path(out).glob("accuracy_checking_result_*.csv")
        with open(result, newline="", encoding="utf-8-sig") as handle:
            return list(csv.DictReader(handle))


def write(dump, key, names):
    folder = dump / "acc_check"
    folder.mkdir(exist_ok=True)
    selection = {"msprobe": "mindstudio-probe 26.2.0", key: names}
    (folder / "selection.json").write_text(json.dumps(selection, indent=1) + "\n")


def main(shim):
    tensor, stats = DATA / "ssm_fp32", DATA / "ssm_stats"
    listed = rows(shim, tensor, "-config", str(tensor / "acc_check" / "config.json"))
    write(tensor, "listed", [row["API name"] for row in listed if not (row["Message"] or "").endswith(LEFT_OUT)])
    write(stats, "filtered", [row["API name"] for row in rows(shim, stats, "-f")])


if __name__ == "__main__":
    main(sys.argv[1])
