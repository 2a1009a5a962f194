"""pytest glue: the options, and a run of the dumps they name.

Loaded in every pytest run of the environment, so it imports nothing heavy:
the run (session.py, and through it numpy, the frameworks, the CSV writers)
is imported only when --msprobe-dump or the ini key msprobe_dump names a dump.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .options import ERROR_DATA_FOLDER, OPTIONS, OptionError, Options, parse
from .untrusted import printable

if TYPE_CHECKING:
    from .frameworks.references import Registry


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprobe", "precision pre-check of msprobe dumps")
    group.addoption(
        "--msprobe-dump",
        action="append",
        metavar="PATH",
        default=[],
        help="a dump.json, or a folder searched for dump.json files; repeatable",
    )
    parser.addini("msprobe_dump", "dump.json files or folders to check", type="paths", default=[])
    for option in OPTIONS:
        # A bare flag says "true"; Option.parse reads it as it reads the ini file's word.
        takes = {"action": "store_const", "const": "true"} if option.bare else {"metavar": option.metavar}
        group.addoption(option.flag, dest=option.ini, default=None, help=option.describe(), **takes)
        parser.addini(option.ini, option.help, default="")
    group.addoption(
        "--msprobe-save-error-data",
        dest="msprobe_save_error_data",
        nargs="?",
        const=True,
        default=None,
        metavar="DIR",
        help="save inputs and outputs of every entry that is not pass, "
        f"with a manifest (default DIR: {ERROR_DATA_FOLDER} under --msprobe-out; "
        "ini msprobe_save_error_data)",
    )
    parser.addini("msprobe_save_error_data", "folder for the error data, or true for the default", default="")
    group.addoption(
        "--msprobe-functions",
        dest="msprobe_functions",
        action="append",
        metavar="FILE",
        default=[],
        help="a Python file the functions of --msprobe-fusion-config and --msprobe-postprocess-config are "
        "imported from (no other file is); repeatable (ini msprobe_functions)",
    )
    parser.addini(
        "msprobe_functions",
        "Python files msprobe's YAML files' functions are imported from",
        type="linelist",
        default=[],
    )
    parser.addini(
        "msprobe_tolerances",
        "dtype standard: per-API budgets, lines `pattern: rtol=.., atol=..`",
        type="linelist",
        default=[],
    )


def read_options(config: pytest.Config, dumps: list[str]) -> Options:
    """The command line first, then the ini file."""
    raw: dict[str, Any] = {option.name: _value(config, option.ini) for option in OPTIONS}
    raw["dumps"] = dumps
    raw["tolerances"] = config.getini("msprobe_tolerances")
    raw["functions"] = config.getoption("msprobe_functions") or config.getini("msprobe_functions")
    raw["save_error_data"] = _value(config, "msprobe_save_error_data")
    try:
        return parse(raw)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _value(config: pytest.Config, ini: str) -> Any:
    value = config.getoption(ini)
    return value if value is not None else config.getini(ini)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import newhooks

    pluginmanager.add_hookspecs(newhooks)


@pytest.hookimpl(tryfirst=True)  # first: a user's registration of the same name replaces one of them
def pytest_msprobe_references(registry: Registry) -> None:
    """The built-in torch_npu references, registered as a conftest's are (no torch imported here)."""
    from .frameworks import npu_builtins

    npu_builtins.register(registry)


def pytest_configure(config: pytest.Config) -> None:
    dumps = config.getoption("msprobe_dump") or [str(p) for p in config.getini("msprobe_dump")]
    if not dumps:
        _no_dump_given(config)
        return  # the plugin is not used: nothing else is read or imported
    options = read_options(config, dumps)
    from .glue import session

    session.start(config, options)


@pytest.hookimpl(tryfirst=True)  # before pytest's own, which imports them
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """pytest imports the conftest.py of the folder it is run from, and of the folders above, before
    any pytest_configure: run from a dump's folders, one there would run. A usage error naming
    it, before it is imported (dump_trees.py says which)."""
    given = early_config.known_args_namespace  # the command line, parsed before conftests load
    dumps = getattr(given, "msprobe_dump", None) or early_config.getini("msprobe_dump")
    if not dumps or given.noconftest:
        return
    from .dumps.trees import conftests_in_dumps  # no numpy, no framework

    found = conftests_in_dumps(
        [Path(p) for p in dumps],
        given.file_or_dir,
        early_config.getini("testpaths"),
        early_config.invocation_params.dir,
        early_config.rootpath,
        early_config.inipath,
        given.confcutdir,
    )
    if found:
        raise pytest.UsageError(
            f"--msprobe-dump: pytest would import {printable(str(found[0]))} when it starts, before any plugin, "
            "and it lies in a dump's folders or above the one pytest is run from: a dump is data, never code; "
            "run pytest from outside the dump's folders"
        )


def _no_dump_given(config: pytest.Config) -> None:
    """`pytest dump.json`: a dump given to pytest, not to --msprobe-dump, is a usage error saying what
    to type (pytest would say "not found"). Read only where an argument is a .json file."""
    given = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    if any(arg.split("::", 1)[0].endswith(".json") for arg in given):
        from .dumps.folder import dump_given_to_pytest

        why = dump_given_to_pytest(given, Path(config.invocation_params.dir))
        if why:
            raise pytest.UsageError(why)
