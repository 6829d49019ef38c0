"""A region on this machine: the gateway (with the region's balancer and embedded Spark), its
routers and its nodes, each a separate process on loopback, started from one configuration and
stopped together.

The region supervises its processes (`supervise`): one that exits, however it died, has what it left
behind killed (a node's scan workers: each process leads its own process group) and is started
again, after a pause that doubles while it keeps failing; the others go on serving. A node that
comes back rejoins its gateway with its data; a gateway that comes back is rejoined by its nodes.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway import Client, GatewayError, free_port
from regions.config import Config
from regions.memory_budgets import node_memory_budget
from storage import ConfigError


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (a service manager, `kill`) stop this process as Ctrl-C does, so the
    `finally` that stops a region's processes runs instead of leaving them orphaned."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


RESTART_PAUSE_S = (0.5, 30.0)  # the first pause before a restart, and the longest
STOP_GRACE_S = 5.0  # how long past gateway.drain_timeout a process told to stop may take before it is killed


class PortInUse(ConfigError):
    code = "port_in_use"


def check_free(host: str, port: int) -> None:
    """PortInUse when another process listens on the gateway's host:port (any other failure to bind
    there is the gateway's to report when it starts)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the gateway's server binds it
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"the gateway's port {host}:{port} is in use by another process: stop it or set another "
                    "gateway.port"
                ) from None


@dataclass
class Role:
    name: str
    args: list[str]
    port: int
    process: subprocess.Popen | None = None
    log: Path | None = None
    restarts: int = 0
    pause: float = RESTART_PAUSE_S[0]
    restart_at: float | None = None  # when the exited process is to be started again
    started_at: float = 0.0


@dataclass
class LocalRegion:
    """Processes of one region. `config_args` are the `--config`/`--set` arguments every process
    gets, so they all read the same configuration; `command` is the `cxg` command line each role
    runs as (`cxg gateway`, `cxg router`, `cxg node`)."""

    config: Config
    config_args: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    roles: list[Role] = field(default_factory=list)
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "cxg"])

    @property
    def url(self) -> str:
        return self.config.gateway.url

    def layout(self) -> list[Role]:
        """The gateway, then the routers, then the nodes (each node joins its router, or the gateway)."""
        region, g = self.config.region, self.config.gateway
        ports = _ports(region.first_port)
        gateway = Role("gateway", ["gateway"], g.port)
        roles = [gateway]
        if region.backend == "native":
            names = [f"node-{i}" for i in range(len(self.config.storage.data))]
        else:
            names = [f"node-{i}" for i in range(region.nodes)]
        if not names:
            raise ConfigError("a region needs at least one node")
        upstreams = [self.url] * len(names)
        if region.routers:
            group = math.ceil(len(names) / region.routers)
            for r in range(region.routers):
                port = next(ports)
                args = ["router", "--name", f"router-{r}", "--host", g.host, "--port", str(port)]
                roles.append(Role(f"router-{r}", args, port))
            upstreams = [f"http://{g.host}:{roles[1 + i // group].port}" for i in range(len(names))]
        regions = self.config.regions
        if regions and regions[self.config.name].default and self.config.balancing.method == "centralized":
            b = self.config.balancing  # the central balancer of the regions runs beside the default region's gateway
            roles.append(Role("central-balancer", ["balance-regions", "--port", str(b.port)], b.port))
        budget = node_memory_budget(self.config, len(names))
        for i, name in enumerate(names):
            port = next(ports)
            args = ["node", "--kind", region.backend, "--name", name, "--host", g.host, "--port", str(port)]
            args += ["--advertise", g.advertised]
            args += ["--upstream", upstreams[i]]
            args += ["--memory", str(budget) if budget else "none"]
            if region.backend == "native":
                args += ["--data", self.config.storage.data[i], "--processes", str(self.config.storage.scan_processes)]
            roles.append(Role(name, args, port))
        return roles

    def start(self, timeout: float = 120.0) -> str:
        """Start every process and wait until all nodes have joined; the gateway's URL."""
        if self.config.gateway.port == 0:
            self.config.gateway.port = free_port()
            self.config_args = [*self.config_args, "--set", f"gateway.port={self.config.gateway.port}"]
        self.run_dir = Path(self.run_dir or tempfile.mkdtemp(prefix="cxg-region-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.roles = self.layout()
        check_free(self.config.gateway.host, self.config.gateway.port)  # else what answers there passes for it
        try:
            for role in self.roles:
                role.log = self.run_dir / f"{role.name}.out"
                role.log.write_bytes(b"")
                self._launch(role)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _launch(self, role: Role) -> None:
        assert role.log is not None
        with role.log.open("ab") as out:
            role.process = subprocess.Popen(
                [*self.command, *self.config_args, *role.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # its own process group: what it starts goes with it
            )
        role.started_at = time.monotonic()

    def supervise(self) -> list[str]:
        """One look at the processes: an exited one has its process group killed and is started
        again once its pause is over (doubling while it keeps failing within a minute of starting).
        Returns what happened, a line per event."""
        events = []
        now = time.monotonic()
        for role in self.roles:
            process = role.process
            if process is None or process.poll() is None:
                if process is not None and role.restarts and now - role.started_at > 60:
                    role.pause = RESTART_PAUSE_S[0]  # up a minute: it is well again
                continue
            if role.restart_at is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)  # what it left running (scan workers, a JVM)
                role.restart_at = now + role.pause
                events.append(
                    f"{role.name} exited (status {process.returncode}); restarting it in {role.pause:g} s\n"
                    f"{self.tail(role, 5)}"
                )
                role.pause = min(role.pause * 2, RESTART_PAUSE_S[1])
            elif now >= role.restart_at:
                role.restart_at = None
                role.restarts += 1
                self._launch(role)
                events.append(f"{role.name} started again (restart {role.restarts})")
        return events

    def _wait_ready(self, timeout: float) -> None:
        nodes = sum(1 for r in self.roles if r.name.startswith("node-"))
        client = Client(self.url, token=self.token(), ca=self.config.gateway.tls_ca or None)
        deadline = time.monotonic() + timeout
        while True:
            dead = self.dead()
            if dead:
                raise RuntimeError(f"{dead.name} exited during start-up:\n{self.tail(dead)}")
            try:
                client.wait_ready(timeout=0.5, nodes=nodes)
                return
            except GatewayError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the region was not ready after {timeout:g} s (logs in {self.run_dir})"
                    ) from None

    def token(self) -> str | None:
        """The query API token a client of this region uses (the first configured), if any."""
        tokens = self.config.gateway.tokens
        return tokens[0].token if tokens else None

    def dead(self) -> Role | None:
        return next((r for r in self.roles if r.process is not None and r.process.poll() is not None), None)

    def tail(self, role: Role, lines: int = 20) -> str:
        if role.log is None or not role.log.exists():
            return ""
        return "\n".join(role.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM to the gateway (and the central balancer) first: it drains, its queries finishing
        on the nodes, which still serve; then to the routers and nodes, which drain too. SIGKILL to a
        process still there `grace` seconds (default gateway.drain_timeout + STOP_GRACE_S) after
        its SIGTERM."""
        grace = self.config.gateway.drain_timeout + STOP_GRACE_S if grace is None else grace
        below = [r for r in reversed(self.roles) if r.name.startswith(("node-", "router-"))]
        for wave in ([r for r in self.roles if r not in below], below):
            running = [r.process for r in wave if r.process is not None and r.process.poll() is None]
            for process in running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for process in running:
                try:
                    process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def __enter__(self) -> LocalRegion:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ports(first: int):
    port = first
    while True:
        if first == 0:
            yield free_port()
        else:
            yield port
            port += 1
