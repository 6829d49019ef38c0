"""A Spark standalone cluster made of the pinned pyspark wheel's own jars and launcher
(``bin/spark-class``; nothing is downloaded): a master and workers as processes. `cxg spark
master` and `cxg spark worker` run one role in the foreground (what the Spark image of
``docker/`` runs); `StandaloneCluster` starts a master and workers on this machine (the tests
and the cluster benchmark) and kills a worker on demand."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.find_spark_home import _find_spark_home

from gateway import free_port, master_status

SPARK_MASTER = "org.apache.spark.deploy.master.Master"
SPARK_WORKER = "org.apache.spark.deploy.worker.Worker"
SCALA_VERSION = "2.13"  # of the wheel's jars: spark-class cannot tell it without a build directory


def spark_home() -> Path:
    """The pyspark wheel's directory: its jars, ``bin/spark-class``."""
    return Path(_find_spark_home())


def role_command(role: str, *args: str) -> list[str]:
    """The command that runs a master (`SPARK_MASTER`) or worker (`SPARK_WORKER`) in the foreground."""
    return [str(spark_home() / "bin" / "spark-class"), role, *args]


def role_environment() -> dict[str, str]:
    """The environment of a master or worker: the wheel as SPARK_HOME, and this interpreter for
    the Python processes a worker starts (an application may name another)."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_SCALA_VERSION": SCALA_VERSION,
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }


def master_args(host: str, port: int, ui_port: int) -> list[str]:
    return ["--host", host, "--port", str(port), "--webui-port", str(ui_port)]


def worker_args(master: str, host: str, cores: int, memory: str, ui_port: int, work_dir: str | None) -> list[str]:
    args = [master, "--host", host, "--cores", str(cores), "--memory", memory, "--webui-port", str(ui_port)]
    return [*args, "--work-dir", work_dir] if work_dir else args


@dataclass
class StandaloneCluster:
    """A master and workers on `host`, their output and executors' directories under `root`;
    a context manager that stops every process it started."""

    root: Path
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    master: subprocess.Popen | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)
    _ui_ports: dict[int, int] = field(default_factory=dict)  # worker pid -> its web UI's port

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    def _start(self, name: str, command: list[str]) -> subprocess.Popen:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{name}.log", "ab") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=role_environment())

    def start_master(self, timeout: float = 60.0) -> None:
        self.master = self._start(
            "master", role_command(SPARK_MASTER, *master_args(self.host, self.port, self.ui_port))
        )
        self._wait(lambda status: status["status"] == "ALIVE", timeout, "the master to start")

    def add_worker(self, cores: int = 1, memory: str = "2g", timeout: float = 60.0) -> subprocess.Popen:
        """Start a worker and wait until the master lists it alive (known by its web UI's port: the
        master may still list a worker killed a moment ago as alive)."""
        index, ui_port = len(self.workers), free_port()
        args = worker_args(self.url, self.host, cores, memory, ui_port, str(self.root / f"worker-{index}"))
        worker = self._start(f"worker-{index}", role_command(SPARK_WORKER, *args))
        self.workers.append(worker)
        self._ui_ports[worker.pid] = ui_port
        self._wait(lambda status: self._listed(status, ui_port), timeout, f"worker {index} to join")
        return worker

    def kill_worker(self, worker: subprocess.Popen, timeout: float = 60.0) -> None:
        """Kill a worker at once (SIGKILL), as a host that fails (its executors exit with it), and
        wait until the master no longer lists it alive."""
        worker.kill()
        worker.wait()
        ui_port = self._ui_ports[worker.pid]
        self._wait(lambda status: not self._listed(status, ui_port), timeout, "the master to see a worker gone")

    @staticmethod
    def _listed(status: dict[str, Any], ui_port: int) -> bool:
        """Whether the master lists the worker whose web UI is on `ui_port` as alive."""
        return any(w["state"] == "ALIVE" and w["webuiaddress"].endswith(f":{ui_port}") for w in status["workers"])

    def _wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited while waiting for {what}: see {self.root / 'master.log'}")
            try:
                if condition(master_status(self.ui_url, timeout=2.0)):
                    return
            except OSError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:g} s for {what}: see the logs in {self.root}")
            time.sleep(0.2)

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.workers, self.master]:
            if process is not None:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start_master()
        except BaseException:
            self.stop()  # a master that did not come up in time is not left running
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
