"""msprobe 26.2.0's PrecisionDebugger as this folder's small dumps take it: task tensor, level L1 with no
API list (every wrapped API, views and casts included), risk level ALL, its config written into OUT."""
import json
import os

from msprobe.pytorch import PrecisionDebugger


def l1_tensor_debugger(out):
    os.makedirs(out, exist_ok=True)
    config = {"task": "tensor", "dump_path": out, "rank": [], "step": [], "level": "L1", "async_dump": False,
              "tensor": {"scope": [], "list": [], "data_mode": ["all"]}, "risk_level": "ALL"}
    path = os.path.join(out, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return PrecisionDebugger(config_path=path)
