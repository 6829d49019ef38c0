"""The gateway's sections of the configuration: `[gateway]` (its address, limits, results,
tokens and TLS), `[sql]` (where its engine runs joins) and `[spark]`, the region's Spark as the
gateway's engine uses it.

The gateway is built from these sections alone; the file they come from, and the sections of the
floors above, are read on the regions floor (`regions.config`). Each option documents itself in its
field's metadata (`doc`), from which `cxg config defaults` prints the default configuration.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from balancer import LOG_FORMATS
from storage import ConfigError, Size

WILDCARDS = ("0.0.0.0", "::", "")


def reachable(host: str, advertise: str = "") -> str:
    """The address a role listening on `host` gives others: `advertise` if set, else `host`, unless
    that means every interface (0.0.0.0): then this host's name."""
    if advertise:
        return advertise
    return socket.gethostname() if host in WILDCARDS else host


SparkFactory = Callable[[], Any]  # the region's SparkSession, started on the first call
JOINS = ("node", "spark")  # where joins may run (`SqlSettings.joins`)


@dataclass
class SqlSettings:
    """How the region's SQL engine runs queries that join."""

    joins: str = field(
        default="node",
        metadata={
            "doc": "node: a query whose tables are all whole on one node is answered there (DataFusion), "
            "the rest on Spark; spark: every join on Spark"
        },
    )

    def check(self) -> None:
        if self.joins not in JOINS:
            raise ConfigError(f"sql.joins must be {' or '.join(JOINS)}, not {self.joins!r}")


SPARK_LOG_LEVELS = ("AUTO", "ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


@dataclass(frozen=True)
class SparkSettings:
    """The region's Spark, as the gateway's engine knows it.

    Plain data: the session itself is built by whoever composes the region (`regions.spark_session`) and
    handed to the engine."""

    master: str = field(default="local[*]", metadata={"doc": "local[*] (Spark in the gateway), spark://host:7077, ..."})
    slots_per_core: int = field(
        default=4,
        metadata={"doc": "task slots of a local master per core (each stage of a query still has a task per core)"},
    )
    driver_memory: str = field(
        default="auto",
        metadata={"doc": "the driver's heap: auto is 40% of the machine's memory (it runs a local master's executors)"},
    )
    shuffle_partitions: int | None = field(
        default=None,
        metadata={"doc": "spark.sql.shuffle.partitions (unset: the cores of a local master)", "example": 8},
    )
    broadcast_threshold: str = field(
        default="10MB",
        metadata={"doc": "spark.sql.autoBroadcastJoinThreshold: small join sides are broadcast (Spark's default)"},
    )
    adaptive: bool = field(
        default=False,
        metadata={"doc": "spark.sql.adaptive.enabled: adaptive execution adds stages that cost more than they save"},
    )
    exchange: str = field(
        default="auto",
        metadata={
            "doc": "how sub-queries reach Spark: files (Parquet), source (the cxg data source), or auto"
            " (files with a local master)"
        },
    )
    exchange_dir: str | None = field(
        default=None,
        metadata={
            "doc": 'where files go (unset or "": the temp dir); for a cluster, storage every executor shares',
            "example": "/shared/cxg-exchange",
        },
    )
    inline: bool = field(
        default=True,
        metadata={"doc": "small fetched sub-queries as VALUES or local relations; false: all through the exchange"},
    )
    gather_rows: int = field(
        default=2_000_000,
        metadata={
            "doc": "a join query whose sub-queries were all fetched, with at most this many rows in all, is"
            " joined at the coordinator by DataFusion, without Spark's fixed cost (0: Spark joins them)"
        },
    )
    executor_wait: float = field(
        default=30.0,
        metadata={"doc": "a cluster: seconds a query waits for an executor (its status: waiting_for), then 503"},
    )
    executor_python: str = field(
        default="", metadata={"doc": "a cluster: the executors' Python (default: the driver's interpreter path)"}
    )
    log_level: str = field(
        default="auto",
        metadata={"doc": "the driver's Spark log level: auto is ERROR for a local master, WARN for a cluster"},
    )
    master_ui: str = field(
        default="",
        metadata={
            "doc": "a standalone master's web UI, whose JSON gives cxg status its workers"
            " (default: the first master's host, port 8080)"
        },
    )
    conf: dict[str, str] = field(
        default_factory=dict,
        metadata={"doc": 'any other spark.* option, e.g. { "spark.executor.memory" = "4g" }'},
    )
    warm_up: bool = field(
        default=True,
        metadata={"doc": "cxg gateway (native nodes) starts Spark in the background at start-up"},
    )

    @property
    def local(self) -> bool:
        """Whether the master is local (Spark embedded in the process), not a cluster."""
        return self.master.strip().startswith("local")

    def exchange_mode(self) -> str:
        if self.exchange == "auto":
            return "files" if self.local else "source"
        return self.exchange

    def check(self) -> None:
        if self.exchange not in ("auto", "files", "source"):
            raise ConfigError(f"spark.exchange must be auto, files or source, not {self.exchange!r}")
        if self.log_level.upper() not in SPARK_LOG_LEVELS:
            levels = ", ".join(SPARK_LOG_LEVELS).lower()
            raise ConfigError(f"spark.log_level must be one of {levels}, not {self.log_level!r}")
        if self.gather_rows < 0:
            raise ConfigError(f"spark.gather_rows must be 0 or more rows, not {self.gather_rows}")
        if self.executor_wait <= 0:
            raise ConfigError(f"spark.executor_wait must be a positive number of seconds, not {self.executor_wait}")


@dataclass
class TokenConfig:
    """A bearer token of the query API, how many queries it may have queued or running, the
    tables it may read (empty: all) and those it may append rows to (empty: none)."""

    name: str = field(metadata={"doc": "who the token is, in the logs and metrics", "example": "reports"})
    token: str = field(
        metadata={"doc": "the secret a client sends as Authorization: Bearer ...", "example": "change-me"}
    )
    max_concurrent: int = field(default=8, metadata={"doc": "its queries queued or running at once"})
    tables: list[str] = field(
        default_factory=list,
        metadata={"doc": "the tables it may read (empty: all)", "example": ["orders", "lineitem"]},
    )
    appends: list[str] = field(
        default_factory=list,
        metadata={"doc": "the tables it may append rows to (empty: none)", "example": ["events"]},
    )


@dataclass
class GatewayConfig:
    """The gateway: where it listens, how long it waits, what it keeps of results, who may query it."""

    host: str = field(default="127.0.0.1", metadata={"doc": "the address it listens on"})
    advertise: str = field(
        default="",
        metadata={"doc": "the address cxg up's nodes give Spark's executors (default: host; 0.0.0.0: the host name)"},
    )
    port: int = field(default=8080, metadata={"doc": "the port it listens on"})
    region: int = field(
        default=1,
        metadata={"doc": "region number, 0..99 (query ids are global·10^8 + region·10^6 + client)"},
    )
    wait: float = field(
        default=10.0, metadata={"doc": "seconds POST /v1/statements waits for the answer before returning an id"}
    )
    max_wait: float = field(default=300.0, metadata={"doc": "the longest wait a request may ask for"})
    query_timeout: float = field(default=3600.0, metadata={"doc": "seconds before a running query is stopped (504)"})
    max_queue: int = field(
        default=0,
        metadata={"doc": "queued queries before new ones get 503 queue_full; 0: 8 per slot of the region's nodes"},
    )
    max_rows: int = field(default=1_000_000, metadata={"doc": "rows kept of a result (more: truncated)"})
    max_bytes: Size = field(default=256 * 1024 * 1024, metadata={"doc": "bytes kept of a result (more: truncated)"})
    chunk_rows: int = field(default=10_000, metadata={"doc": "rows per result chunk"})
    max_append_bytes: Size = field(
        default=16 * 1024 * 1024,
        metadata={"doc": "bytes of one append's body (POST /v1/tables/{name}/rows; more: 413 append_too_large)"},
    )
    result_ttl: float = field(default=600.0, metadata={"doc": "seconds a finished statement stays readable"})
    result_memory: Size = field(
        default=1024 * 1024 * 1024,
        metadata={"doc": "bytes of results all finished statements keep (past it the oldest are dropped: 410)"},
    )
    cluster_token: str = field(
        default="",
        metadata={"doc": "shared secret of the links between gateway, routers and nodes, and of cxg drain"},
    )
    log_dir: str = field(
        default="",
        metadata={"doc": "where every role writes its logs: general, per-query CSV, queue CSV (empty: no files)"},
    )
    subscriptions_file: str = field(
        default="",
        metadata={
            "doc": "where standing queries are kept so that they survive a restart, gathered again from the"
            " nodes' states when first asked for (empty: in memory; after a restart their ids answer 404)"
        },
    )
    log_format: str = field(
        default="json",
        metadata={"doc": "every role's log lines: json (an object per line, with the query's id) or text"},
    )
    drain_timeout: float = field(
        default=30.0,
        metadata={"doc": "seconds a gateway, router or node given SIGTERM takes no query and lets its own finish"},
    )
    tokens: list[TokenConfig] = field(
        default_factory=list,
        metadata={"doc": "bearer tokens of the query API, a [[gateway.tokens]] table each (none: no authentication)"},
    )
    tls_cert: str = field(
        default="", metadata={"doc": "PEM certificate (chain) of the gateway: with tls_key it serves HTTPS only"}
    )
    tls_key: str = field(default="", metadata={"doc": "PEM private key of tls_cert"})
    tls_ca: str = field(
        default="",
        metadata={"doc": "what nodes, routers and the CLI trust to reach the gateway over TLS (empty: the system's)"},
    )

    @property
    def url(self) -> str:
        return self.url_on(self.host)

    @property
    def advertised(self) -> str:
        """The address other hosts reach this machine's roles on."""
        return reachable(self.host, self.advertise)

    @property
    def result_bytes(self) -> int:
        """The most bytes one result keeps: `max_bytes`, within `result_memory`."""
        return min(self.max_bytes, self.result_memory)

    def url_on(self, host: str) -> str:
        """The gateway's URL through `host` (HTTPS with a certificate)."""
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"

    def server_tls(self) -> ssl.SSLContext | None:
        """The gateway's TLS context (None without a certificate)."""
        if not self.tls_cert:
            return None
        if not self.tls_key:
            raise ConfigError("gateway.tls_cert needs gateway.tls_key (the certificate's private key)")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot use gateway.tls_cert {self.tls_cert} with its key {self.tls_key}: {e}") from None
        return context

    def client_tls(self) -> ssl.SSLContext | None:
        """What a role dialling the gateway verifies it with (None: plain HTTP)."""
        if not self.tls_cert:
            return None
        try:
            return ssl.create_default_context(cafile=self.tls_ca or None)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot read gateway.tls_ca {self.tls_ca}: {e}") from None

    def check(self) -> None:
        if not 0 <= self.region < 100:
            raise ConfigError(f"gateway.region must be in 0..99, not {self.region}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"gateway.log_format must be json or text, not {self.log_format!r}")
        if self.drain_timeout < 0:
            raise ConfigError(f"gateway.drain_timeout must be 0 or more seconds, not {self.drain_timeout}")
        names = [t.name for t in self.tokens]
        if len(set(names)) != len(names) or len({t.token for t in self.tokens}) != len(names):
            raise ConfigError("[[gateway.tokens]] names and tokens must be unique")
