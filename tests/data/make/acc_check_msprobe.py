"""tests/data/select_stats/acc_check/selection.json: what msprobe 26.2.0's own acc_check chooses on the
dump tests/data/select_stats, from the rows of its own result CSV (run on the CPU through
../../../../shared/tools/msprobe_cpu_acc_check.py, about a minute a run):

- `listed`: the calls it checks under acc_check/config.json's white and black lists (`-config`); it
  writes a row `API <api> in black list or not in white list. SKIP.` for each other call;
- `filtered`: the calls it checks with `-f` (`--filter_api`) and no config: of the calls of an API
  equal but for Max and Min, the first.

    python acc_check_msprobe.py SHIM   (in msprobe's venv; SHIM: the path of msprobe_cpu_acc_check.py)
"""

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

DUMP = Path(__file__).resolve().parent.parent / "select_stats"
LEFT_OUT = "in black list or not in white list. SKIP."


def rows(shim, *args):
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, shim, "acc_check", "-api_info", str(DUMP / "dump.json"), "-o", out, *args]
        subprocess.run(command, check=True, capture_output=True)
        (result,) = Path(out).glob("accuracy_checking_result_*.csv")
        with open(result, newline="", encoding="utf-8-sig") as handle:
            return list(csv.DictReader(handle))


def main(shim):
    listed = [row["API name"] for row in rows(shim, "-config", str(DUMP / "acc_check" / "config.json"))
              if not (row["Message"] or "").endswith(LEFT_OUT)]
    filtered = [row["API name"] for row in rows(shim, "-f")]
    selection = {"msprobe": "mindstudio-probe 26.2.0", "listed": listed, "filtered": filtered}
    (DUMP / "acc_check" / "selection.json").write_text(json.dumps(selection, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
