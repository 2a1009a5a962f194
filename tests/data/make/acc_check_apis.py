"""Write pytest_msprobe/dumps/acc_check_apis.txt: the API names msprobe 26.2.0's acc_check takes in a
white_list or black_list, from the installed package itself.

msprobe checks every name of its config's lists against its set of wrapped APIs (pt_config.py,
ACCCheckConfig.WrapApi = get_ops(): the functional, tensor, torch and torch_npu sections of its
support_wrap_ops.yaml, names without their type) and refuses the config where one is not there.
Run in msprobe's venv (../../../../shared/dumps/README.md):

    python tests/data/make/acc_check_apis.py > pytest_msprobe/dumps/acc_check_apis.txt
"""

from importlib.metadata import version

from msprobe.pytorch.dump.api_dump.utils import get_ops

print(f"# The API names mindstudio-probe {version('mindstudio-probe')}'s acc_check takes in its white_list and")
print("# black_list (ACCCheckConfig.WrapApi: the functional, tensor, torch and torch_npu sections of its")
print("# support_wrap_ops.yaml), written by tests/data/make/acc_check_apis.py from the installed package.")
for name in sorted(get_ops()):
    print(name)
