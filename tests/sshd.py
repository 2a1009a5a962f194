"""Hosts for the multi-host tests: an `sshd` on 127.0.0.1 per host, each on its own port.

Each host has a throwaway host key, one authorized key (the test's), a `SetEnv
MSPROBE_TEST_HOST=<name>` so that a worker can tell which sshd it came through, and an entry
in an ssh config file that pytest-xdist's `ssh_config=` key hands to ssh. `hide` runs every
session of that host in its own mount namespace with a folder covered by an empty tmpfs, or
by another folder: a path that this host cannot see, or sees other files at. Nothing here
waits on a sleep: readiness is a loop of `ssh HOST true` with a deadline.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

STARTUP_S = 120  # sshd and the first ssh session, on a loaded 2-core machine


def find_sshd() -> Optional[str]:
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def skip_reason() -> Optional[str]:
    """Why these tests cannot run here, or None."""
    if find_sshd() is None:
        return "sshd is not installed (apt-get install -y openssh-server; .ci/run installs it where apt-get works)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y openssh-client)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children(pid: int) -> List[int]:
    """The processes whose parent is pid (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid:
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> List[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def kill(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class Host:
    name: str
    port: int
    folder: Path
    process: subprocess.Popen
    ssh_config: Path
    started: List[int] = field(default_factory=list)  # worker pids the tests recorded, killed at the end

    def drop(self) -> None:
        """The host drops out: its sshd and every ssh session it serves die; its connections break."""
        sessions = descendants(self.process.pid)
        kill([self.process.pid])
        self.process.wait(timeout=30)
        kill(sessions)

    def stop(self) -> None:
        leftovers = descendants(self.process.pid) if self.process.poll() is None else []
        kill([self.process.pid, *leftovers, *self.started])
        self.process.wait(timeout=30)

    def spec(self, workers: int, python: str, chdir: Path) -> str:
        """A --tx value: `workers` workers on this host."""
        return f"{workers}*ssh_config={self.ssh_config}//ssh={self.name}//python={python}//chdir={chdir}"


class Hosts:
    """sshd instances on 127.0.0.1 standing for hosts, with one ssh config file naming them all."""

    def __init__(self, folder: Path):
        reason = skip_reason()
        if reason:
            pytest.skip(reason)
        self.folder = folder
        self.hosts: Dict[str, Host] = {}
        self.ssh_config = folder / "ssh_config"
        self.user_key = folder / "user_key"
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
        subprocess.run([*keygen, "-f", str(self.user_key)], check=True)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder

    def start(self, name: str, env: Optional[Dict[str, str]] = None, hide: Optional[Path] = None,
              hide_with: Optional[Path] = None) -> Host:
        folder = self.folder / name
        folder.mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "host_key")], check=True)
        shutil.copy(f"{self.user_key}.pub", folder / "authorized_keys")
        port = free_port()
        settings = {"MSPROBE_TEST_HOST": name, **(env or {})}
        lines = [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {folder / 'host_key'}",
            f"PidFile {folder / 'sshd.pid'}",
            f"AuthorizedKeysFile {folder / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            "MaxStartups 100",
            "MaxSessions 100",
            "LogLevel ERROR",
            "SetEnv " + " ".join(f"{key}={value}" for key, value in settings.items()),
        ]
        if hide is not None:
            script = folder / "hide.sh"
            cover = f"mount --bind {hide_with} {hide}" if hide_with else f"mount -t tmpfs msprobe-hidden {hide}"
            script.write_text(f'#!/bin/sh\n{cover} || exit 97\nexec sh -c "$SSH_ORIGINAL_COMMAND"\n')
            script.chmod(0o755)
            lines.append(f"ForceCommand unshare -m {script}")
        (folder / "sshd_config").write_text("\n".join(lines) + "\n")
        log = open(folder / "sshd.log", "w")  # noqa: SIM115 - sshd writes it for its lifetime
        process = subprocess.Popen([find_sshd(), "-D", "-e", "-f", str(folder / "sshd_config")],
                                   stdout=log, stderr=subprocess.STDOUT)
        host = Host(name, port, folder, process, self.ssh_config)
        self.hosts[name] = host
        self.write_config()
        self.wait_ready(host)
        return host

    def write_config(self) -> None:
        entries = []
        for host in self.hosts.values():
            entries += [
                f"Host {host.name}",
                "  HostName 127.0.0.1",
                f"  Port {host.port}",
                f"  User {getpass.getuser()}",
                f"  IdentityFile {self.user_key}",
                "  IdentitiesOnly yes",
                "  StrictHostKeyChecking no",
                "  UserKnownHostsFile /dev/null",
                "  BatchMode yes",
                "  LogLevel ERROR",
                "  ConnectTimeout 60",
            ]
        self.ssh_config.write_text("\n".join(entries) + "\n")

    def ssh(self, host: Host, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.ssh_config), host.name, command],
                              capture_output=True, text=True, timeout=timeout)

    def wait_ready(self, host: Host) -> None:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if host.process.poll() is not None:
                pytest.skip(f"sshd did not start: {(host.folder / 'sshd.log').read_text()[-500:]}")
            try:
                done = self.ssh(host, "true", timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                done = None
            if done is not None and done.returncode == 0:
                return
            if done is not None and done.returncode == 97:
                pytest.skip("this machine cannot give an ssh session its own mount namespace (unshare -m, mount)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ssh to {host.name} failed for {STARTUP_S} s: {done.stderr if done else ''}")
            time.sleep(0.2)  # between tries of a condition, not a wait for it

    def stop(self) -> None:
        for host in self.hosts.values():
            host.stop()
