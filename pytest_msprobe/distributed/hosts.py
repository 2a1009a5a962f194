"""The hosts of a distributed run: which host each pytest-xdist worker runs on, a device pool per host.

No pytest, no execnet: a worker's host is read from its gateway spec as written on the
command line (`--tx 8*ssh=npu1//python=/opt/venv/bin/python//chdir=/shared/run`): the `ssh=`
value's destination names the host, with its port where one is given (`-F cfg npu1` is npu1;
`-p 2201 npu1` and `-p 2202 npu1` are two hosts, npu1:2201 and npu1:2202), `popen` is the
controller's own host. Device ids are per host: `--msprobe-devices
0-7` gives each host's workers the ids 0 to 7 of that host.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..frameworks.devices import DevicePool

LOCAL = "localhost"  # the host of `popen` workers: the controller's


def spec_keys(spec: object) -> dict[str, str]:
    """`ssh=npu1//python=/opt/venv/bin/python` -> {"ssh": "npu1", "python": ...}; an
    execnet XSpec reads as its text."""
    keys: dict[str, str] = {}
    for part in str(spec).split("//"):
        key, _, value = part.partition("=")
        if key:
            keys[key] = value
    return keys


def host_of(spec: object) -> str:
    """The host a gateway spec starts its worker on."""
    keys = spec_keys(spec)
    for key in ("ssh", "vagrant_ssh"):
        if keys.get(key):
            return ssh_destination(keys[key])
    if keys.get("socket"):
        return f"socket {keys['socket']}"
    if keys.get("via"):
        return f"via {keys['via']}"
    return LOCAL


# ssh's options that take an argument (ssh(1)); the others are bare flags.
_SSH_ARGUMENT_OPTIONS = set("BbcDEeFIiJLlmOoPpQRSWw")


def ssh_destination(command: str) -> str:
    """The host an `ssh=` value reaches: its destination, past ssh's options, with `:port` where
    `-p` gives one (`-F cfg -p 2202 root@npu1` -> root@npu1:2202). The whole text where it does
    not parse (it is still a name for the host)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    port, at = "", 0
    while at < len(words) and words[at].startswith("-") and len(words[at]) > 1:
        word = words[at]
        for position, letter in enumerate(word[1:], start=1):
            if letter in _SSH_ARGUMENT_OPTIONS:
                value = word[position + 1 :]
                if not value:  # `-p 2202`: the value is the next word
                    at += 1
                    value = words[at] if at < len(words) else ""
                if letter == "p":
                    port = value
                break
        at += 1
    if at >= len(words):
        return command
    return f"{words[at]}:{port}" if port else words[at]


def is_remote(spec: object) -> bool:
    """A worker on another host than the controller's (not a `popen` one)."""
    return "popen" not in spec_keys(spec)


def expand(tx: Iterable[str]) -> list[str]:
    """One spec per worker, as pytest-xdist reads `--tx`: `3*popen` is three `popen`."""
    specs: list[str] = []
    for spec in tx:
        head, star, rest = spec.partition("*")
        specs += [rest] * int(head) if star and head.isdigit() else [spec]
    return specs


def plan(tx: Iterable[str]) -> dict[str, int]:
    """Workers per host, in the order the hosts are first named."""
    counts: dict[str, int] = {}
    for spec in expand(tx):
        host = host_of(spec)
        counts[host] = counts.get(host, 0) + 1
    return counts


class HostPools:
    """A DevicePool per host, all with the same ids: a worker takes a free id of its own host."""

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)
        self.pools: dict[str, DevicePool] = {}
        self.hosts: dict[str, str] = {}  # worker -> host

    def allocate(self, host: str, worker: str) -> int:
        self.hosts[worker] = host
        return self.pools.setdefault(host, DevicePool(self.ids)).allocate(worker)

    def release(self, worker: str) -> int | None:
        host = self.hosts.get(worker)
        return self.pools[host].release(worker) if host in self.pools else None

    def host(self, worker: str) -> str:
        return self.hosts.get(worker, LOCAL)


def rewritten_paths(args: Iterable[str], roots: Sequence[Path]) -> list[str]:
    """The arguments pytest-xdist cannot hand to a worker on another host.

    For `ssh` (and `chdir`) workers xdist rewrites every argument that is a path existing
    here relative to its rsync roots, and fails on one outside them (make_reltoroot): a
    dump given as `--msprobe-dump /shared/dump` is two arguments, the second a local path.
    `--msprobe-dump=/shared/dump` is one argument that is no path, and goes as written.
    """
    refused = []
    for arg in args:
        path = Path(arg.split("::")[0])
        try:
            exists = path.exists()
        except OSError:
            exists = False
        if not exists:
            continue
        if not any(path == root or root in path.parents for root in roots):  # as given, as xdist compares
            refused.append(arg)
    return refused
