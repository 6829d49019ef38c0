"""Hosts on one machine: Linux network namespaces, each with its own address on a private bridge
(iproute2's `ip netns` and veth pairs; needs root). A process started through `prefix(name)` sees
only its own host's interfaces: what it reaches of the others goes through the bridge, as it would
through a network.

    with Hosts(["r1", "r2"]) as hosts:      # 10.77.0.1, 10.77.0.2; this machine is 10.77.0.254
        subprocess.Popen([*hosts.prefix("r1"), "python", "-m", "cxg", ...])
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

SUBNET = "10.77.0"
BRIDGE = "cxg-br0"
LOCK = os.path.join(tempfile.gettempdir(), "cxg-netns.lock")  # the bridge and subnet are the machine's


def available() -> str | None:
    """Why hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"ip netns does not work here: {probe.stderr.strip()}"


def _ip(*args: str, namespace: str | None = None) -> None:
    command = ["ip", *(["netns", "exec", namespace, "ip"] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


@dataclass
class Hosts:
    names: list[str]
    addresses: dict[str, str] = field(default_factory=dict)
    machine: str = f"{SUBNET}.254"  # this machine's address on the bridge
    _lock: int | None = None

    def namespace(self, name: str) -> str:
        return f"cxg-{name}"

    def prefix(self, name: str) -> list[str]:
        """What to put before a command to run it on host `name`."""
        return ["ip", "netns", "exec", self.namespace(name)]

    def __enter__(self) -> Hosts:
        """Make the hosts; one set at a time on a machine (another process's waits until it exits)."""
        self._lock = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.remove()  # what a run that died left
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{self.machine}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i, name in enumerate(self.names, start=1):
            ns, outside, inside = self.namespace(name), f"cxg-v{i}", f"cxg-v{i}p"
            _ip("netns", "add", ns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", BRIDGE)
            _ip("link", "set", outside, "up")
            self.addresses[name] = f"{SUBNET}.{i}"
            _ip("addr", "add", f"{self.addresses[name]}/24", "dev", inside, namespace=ns)
            _ip("link", "set", inside, "up", namespace=ns)
            _ip("link", "set", "lo", "up", namespace=ns)
        return self

    def remove(self) -> None:
        """Remove the bridge and the namespaces (and their veth ends with them)."""
        for name in self.names:
            subprocess.run(["ip", "netns", "del", self.namespace(name)], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)

    def __exit__(self, *exc: object) -> None:
        self.remove()
        if self._lock is not None:
            os.close(self._lock)  # the lock goes with it
            self._lock = None
