"""A real MariaDB server in a temporary directory, for the tests and benchmarks of the `mysql` node backend
(the test bootstrap installs mariadb-server with apt-get when it is missing)."""

from __future__ import annotations

import getpass
import shutil
import subprocess
import time
from pathlib import Path

import pymysql

from gateway import free_port


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or next(
            (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()), None
        )
        if found:
            return found
    raise RuntimeError(f"MariaDB is not installed ({' or '.join(names)} missing): run scripts/bootstrap.sh dev")


def available() -> bool:
    """Whether a MariaDB server binary is installed here."""
    try:
        _binary("mariadbd", "mysqld")
        return True
    except RuntimeError:
        return False


class MariaDB:
    def __init__(self, root: Path, buffer_pool: str = "64M"):
        self.root = root
        self.buffer_pool = buffer_pool  # InnoDB's cache: small for tests, the data's size for benchmarks
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/tpch"

    def start(self, timeout: float = 60.0) -> None:
        data = self.root / "data"
        user = getpass.getuser()
        install = [_binary("mariadb-install-db", "mysql_install_db"), "--no-defaults", f"--datadir={data}"]
        install += [f"--user={user}", "--auth-root-authentication-method=normal", "--skip-test-db"]
        subprocess.run(install, check=True, capture_output=True)
        server = [_binary("mariadbd", "mysqld"), "--no-defaults", f"--datadir={data}", f"--user={user}"]
        server += [f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.root / 'sock'}"]
        server += [f"--pid-file={self.root / 'pid'}", "--skip-log-bin"]
        server += [f"--innodb-buffer-pool-size={self.buffer_pool}"]
        self.log = (self.root / "server.log").open("wb")
        self.process = subprocess.Popen(server, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root").close()
                return
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"MariaDB did not start: {(self.root / 'server.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def __enter__(self) -> MariaDB:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
