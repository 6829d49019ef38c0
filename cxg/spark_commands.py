"""`cxg spark master` and `cxg spark worker`: one role of a Spark standalone cluster in the
foreground, from the pinned pyspark wheel (what the Spark image of ``docker/`` runs). The process
becomes the role's JVM, so signals reach Spark itself."""

from __future__ import annotations

import argparse
import os
import socket

from regions import (
    SPARK_MASTER,
    SPARK_WORKER,
    Config,
    master_args,
    role_command,
    role_environment,
    worker_args,
)
from storage import ConfigError


def _exec(command: list[str]) -> int:
    os.execve(command[0], command, role_environment())
    return 0  # not reached: the process is Spark's now


def cmd_master(args: argparse.Namespace, config: Config) -> int:
    return _exec(role_command(SPARK_MASTER, *master_args(args.host, args.port, args.webui_port)))


def cmd_worker(args: argparse.Namespace, config: Config) -> int:
    master = args.master or config.spark.master
    if not master.startswith("spark://"):
        raise ConfigError(f"a worker needs a standalone master (spark://host:port), not {master!r}: give --master")
    cores = args.cores or os.cpu_count() or 1
    args = worker_args(master, args.host, cores, args.memory, args.webui_port, args.work_dir)
    return _exec(role_command(SPARK_WORKER, *args))


def register(sub: argparse._SubParsersAction) -> None:
    spark = sub.add_parser("spark", help="run a Spark standalone master or worker (from the pyspark wheel)")
    roles = spark.add_subparsers(dest="role", required=True)
    p = roles.add_parser("master", help="run a Spark standalone master in the foreground")
    p.add_argument("--host", default=socket.gethostname(), help="its address, which workers dial (default: host name)")
    p.add_argument("--port", type=int, default=7077)
    p.add_argument("--webui-port", type=int, default=8080, help="its web UI, whose /json/ says the workers")
    p.set_defaults(func=cmd_master)

    p = roles.add_parser("worker", help="run a Spark standalone worker in the foreground")
    p.add_argument("--master", help="spark://host:port (default: spark.master of the configuration)")
    p.add_argument("--host", default=socket.gethostname(), help="its address (default: host name)")
    p.add_argument("--cores", type=int, help="cores it offers (default: this machine's)")
    p.add_argument("--memory", default="2g", help="memory it offers executors (default 2g)")
    p.add_argument("--webui-port", type=int, default=8081)
    p.add_argument("--work-dir", help="executors' directories (default: Spark's work/ under the wheel)")
    p.set_defaults(func=cmd_worker)
