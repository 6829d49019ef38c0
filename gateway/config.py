"""Configuration: one TOML file, every option overridable on the command line.

Every value is checked against its option's declared type when the file and the `--set`
overrides are read, so a mistake is reported by its key instead of surfacing later as a
strange behaviour (a path given where a list is expected is a one-element list).
"""

from __future__ import annotations

import re
import socket
import ssl
import tomllib
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from balancer.logs import FORMATS as LOG_FORMATS
from balancer.simulation import QueryType, table_5_5

DEFAULT_CONFIG = Path("cxg.toml")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", re.IGNORECASE)


class ConfigError(ValueError):
    code = "invalid_config"


WILDCARDS = ("0.0.0.0", "::", "")


def reachable(host: str, advertise: str = "") -> str:
    """The address a role listening on `host` gives others: `advertise` if set, else `host`, unless
    that means every interface (0.0.0.0): then this host's name."""
    if advertise:
        return advertise
    return socket.gethostname() if host in WILDCARDS else host


def parse_size(text: str | int) -> int:
    """Bytes from `123`, `64MiB`, `1.5GB`, `512k`."""
    if isinstance(text, int):
        return text
    m = _SIZE.fullmatch(text)
    if not m:
        raise ConfigError(f"not a size: {text!r} (try 64MiB)")
    unit = (m[2] or "").lower()
    base = 1024 if "i" in unit else 1000
    power = "bkmgt".index(unit[0]) if unit and unit[0] != "b" else 0
    return int(float(m[1]) * base**power)


def format_size(n: float) -> str:
    """`n` bytes as people read them: 950 B, 1.25 MB (powers of 1000, as `parse_size` reads them)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


DEFAULT_DATA = ["data/node-0", "data/node-1"]  # where `cxg load`, `cxg storage`, `cxg up` and `cxg demo` meet


@dataclass
class StorageConfig:
    data: list[str] = field(default_factory=lambda: list(DEFAULT_DATA))  # one directory per node
    block_budget: int = 64 * 1024 * 1024  # BS: bytes of one decoded block
    compression: str = "zstd"  # block files on disk: zstd or none
    buckets: int = 16  # hash buckets of hash-placed tables
    zstd_strings: bool = True  # keep free-text strings zstd-compressed in memory
    backend: str = "auto"  # scan kernels: auto (CuPy when a CUDA device is present), numpy or cupy
    ingest: str = "spark"  # cxg load: spark (the ingest pipeline) or local (in this process)
    # private memory a node process may hold (each of its scan workers: a third): auto (the machine's,
    # less Spark's driver and the system's share, split over the region's nodes), a size, or none
    node_memory: str = "auto"
    # memory of each GPU a node's scans may use together (its three areas: a third each): auto (90%
    # of the device's) or a size
    device_memory: str = "auto"


@dataclass
class SparkConfig:
    master: str = "local[*]"  # or spark://host:7077, yarn, ...
    slots_per_core: int = 4  # task slots of a local master per core (a query's stages: a task per core)
    driver_memory: str = "auto"  # auto: a share of this machine's memory (regions.spark_session)
    shuffle_partitions: int | None = None  # default: the cores of a local master
    broadcast_threshold: str = "10MB"
    adaptive: bool = False  # spark.sql.adaptive.enabled
    exchange: str = "auto"  # sub-queries reach Spark as Parquet files, through the cxg data source, or auto
    exchange_dir: str | None = None  # where exchange files go (shared storage for a remote cluster)
    inline: bool = True  # small fetched sub-queries as VALUES or local relations (false: all through the exchange)
    executor_wait: float = 30.0  # a cluster: seconds a query waits for an executor before failing
    executor_python: str = ""  # a cluster: the executors' Python (default: the driver's interpreter path)
    log_level: str = "auto"  # Spark's driver log level: ERROR for a local master, WARN for a cluster
    master_ui: str = ""  # a standalone master's web UI (its JSON lists the workers): default its host, port 8080
    conf: dict[str, str] = field(default_factory=dict)  # any other spark.* option
    warm_up: bool = True  # `cxg gateway` (native nodes) starts Spark in the background at start-up

    def settings(self) -> SparkSettings:
        return SparkSettings(
            master=self.master,
            slots_per_core=self.slots_per_core,
            driver_memory=self.driver_memory,
            shuffle_partitions=self.shuffle_partitions,
            broadcast_threshold=self.broadcast_threshold,
            adaptive=self.adaptive,
            conf=dict(self.conf),
            exchange=self.exchange,
            exchange_dir=self.exchange_dir or None,  # "" in a file: the temp dir
            inline=self.inline,
            executor_wait=self.executor_wait,
            executor_python=self.executor_python,
            log_level=self.log_level,
            master_ui=self.master_ui,
        )


SparkFactory = Callable[[], Any]  # the region's SparkSession, started on the first call


@dataclass(frozen=True)
class SparkSettings:
    """What the engine needs to know of the region's Spark: plain data. The session itself is
    built by whoever composes the region (`regions.spark_session`) and handed to the engine."""

    master: str = "local[*]"
    slots_per_core: int = 4  # task slots of a local master per core (`regions.spark_session.local_master`)
    app_name: str = "cxg"
    driver_memory: str = "auto"
    shuffle_partitions: int | None = None  # default: the cores of a local master
    broadcast_threshold: str = "10MB"  # Spark's default; small sub-queries arrive as sized local relations
    adaptive: bool = False  # adaptive query execution: adds stages that cost more than they save here
    conf: dict[str, str] = field(default_factory=dict)  # any other spark.* option
    exchange: str = "auto"  # how sub-queries reach Spark: files, source, or auto (files with a local master)
    exchange_dir: str | None = None  # where "files" writes (default: the temp dir); shared storage for a cluster
    inline: bool = True  # small fetched sub-queries as VALUES or local relations; false: all through the exchange
    executor_wait: float = 30.0  # a cluster: seconds a query waits for an executor before failing (503, retry)
    executor_python: str = ""  # a cluster: the executors' Python (default: the driver's interpreter path)
    log_level: str = "auto"  # Spark's log level in the driver: auto is ERROR for a local master, WARN for a cluster
    master_ui: str = ""  # a standalone master's web UI, whose JSON lists the workers (default: its host, port 8080)

    @property
    def local(self) -> bool:
        """Whether the master is local (Spark embedded in the process), not a cluster."""
        return self.master.strip().startswith("local")

    def exchange_mode(self) -> str:
        if self.exchange == "auto":
            return "files" if self.local else "source"
        return self.exchange


@dataclass
class TokenConfig:
    """A bearer token of the query API, how many queries it may have queued or running, and the
    tables it may read (empty: all)."""

    name: str
    token: str
    max_concurrent: int = 8
    tables: list[str] = field(default_factory=list)


@dataclass
class GatewayConfig:
    host: str = "127.0.0.1"
    advertise: str = ""  # the address `cxg up`'s nodes give Spark's executors (default: host; 0.0.0.0: host name)
    port: int = 8080
    region: int = 1  # region number, 0..99 (query ids are global·10^8 + region·10^6 + client)
    wait: float = 10.0  # seconds POST /v1/statements waits for the answer before returning an id
    max_wait: float = 300.0  # the longest wait a request may ask for
    query_timeout: float = 3600.0  # seconds before a query is stopped (504)
    max_queue: int = 0  # queued queries before new ones get 503; 0: 8 per slot of the region's nodes
    max_rows: int = 1_000_000  # rows kept of a result (more: truncated)
    max_bytes: int = 256 * 1024 * 1024  # bytes kept of a result (more: truncated)
    chunk_rows: int = 10_000  # rows per result chunk
    result_ttl: float = 600.0  # seconds a finished statement stays readable
    result_memory: int = 1024 * 1024 * 1024  # bytes of results all finished statements keep (the oldest go first)
    cluster_token: str = ""  # shared secret of the links between balancer, routers and nodes
    log_dir: str = ""  # where the roles write their logs (empty: no files)
    log_format: str = "json"  # every role's log lines: json (an object per line, with the query's id) or text
    drain_timeout: float = 30.0  # seconds a gateway, router or node told to stop (SIGTERM) lets its queries finish
    tokens: list[TokenConfig] = field(default_factory=list)  # none: no authentication
    tls_cert: str = ""  # PEM certificate (chain) of the gateway: set with tls_key, it serves HTTPS only
    tls_key: str = ""  # PEM private key of tls_cert
    tls_ca: str = ""  # what nodes, routers and the CLI trust to reach the gateway over TLS (empty: the system's)

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


@dataclass
class RegionConfig:
    """What `cxg up` starts: the region's nodes (and routers) as processes on this machine."""

    backend: str = "native"  # native (storage nodes), mysql or simulation
    nodes: int = 2  # mysql and simulation; native starts one node per storage.data directory
    slots: int = 0  # per node; 0: the machine's cores
    routers: int = 0  # 0: nodes talk to the balancer; N: N routers share the nodes
    mysql_url: str = "mysql://root@127.0.0.1:3306/tpch"
    first_port: int = 8101  # nodes and routers listen on the ports from here; 0: any free port
    dispatch: str = "round-robin"  # round-robin (PerformSys) or free-slot-first (balancer and routers)
    # the region reports itself overloaded (log, /v1/regions/load, metrics) once its queue weight (queued
    # volume per server) has stayed above overload_weight for overload_seconds; seconds <= 0: never
    overload_weight: float = 0.0
    overload_seconds: float = 30.0


@dataclass
class SimulationConfig:
    time_scale: float = 0.001  # real seconds per simulated second
    size_gb: int = 5  # which column of seed 004 Table 5.5 gives the query times
    # tag -> {seconds, rows, volume (V_σ: what balancing between regions weighs)}; replaces Table 5.5
    queries: dict[str, dict[str, float]] = field(default_factory=dict)

    def query_types(self) -> dict[str, QueryType]:
        if not self.queries:
            return table_5_5(self.size_gb)
        try:
            return {
                tag: QueryType(float(q["seconds"]), int(q.get("rows", 1)), float(q.get("volume", 1.0)))
                for tag, q in self.queries.items()
            }
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"[simulation.queries] needs seconds (and rows, volume) per query type: {e}") from None


BALANCING_METHODS = ("none", "centralized", "decentralized", "idle-pull")  # regions.balancing implements them
BALANCING_WEIGHTS = ("printed", "per-server")


@dataclass
class BalancingConfig:
    """Balancing between the regions of a file with `[regions.NAME]` tables (seed 004 §5.2)."""

    method: str = "none"  # none, centralized, decentralized or idle-pull
    weight: str = "printed"  # W_r as printed (mean volume of a queued query) or per-server (without L_r)
    poll: float = 0.5  # seconds between looks at the other regions' queues
    peer_timeout: float = 5.0  # seconds a region may not answer before the queries moved to it go home
    host: str = "127.0.0.1"  # the central balancer (method centralized)
    port: int = 8090


SECTIONS = {
    "storage": StorageConfig,
    "spark": SparkConfig,
    "gateway": GatewayConfig,
    "region": RegionConfig,
    "simulation": SimulationConfig,
    "balancing": BalancingConfig,
}
REGION_SECTIONS = ("storage", "spark", "gateway", "region", "simulation")  # what a [regions.NAME] table may set
SIZES = {"block_budget", "max_bytes", "result_memory"}


@dataclass(frozen=True)
class Peer:
    """One region of a multi-region file, as the others see it."""

    name: str
    number: int  # gateway.region
    url: str  # its gateway, as the other regions reach it
    databases: dict[str, list[str]]  # database -> tables, held by this region
    copies_of: tuple[str, ...]  # regions whose databases it keeps copies of
    default: bool = False

    def tables(self, regions: dict[str, Peer]) -> frozenset[str] | None:
        """The tables it holds, its own and its copies (None: it names none, so whatever it serves)."""
        held = [self.databases, *(regions[name].databases for name in self.copies_of)]
        if not any(held):
            return None
        return frozenset(t.lower() for databases in held for tables in databases.values() for t in tables)


@dataclass
class Config:
    storage: StorageConfig = field(default_factory=StorageConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    region: RegionConfig = field(default_factory=RegionConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    balancing: BalancingConfig = field(default_factory=BalancingConfig)
    regions: dict[str, Peer] = field(default_factory=dict)  # a multi-region file's regions, by name
    name: str = ""  # which of them this configuration is (empty: a file of one region)

    @property
    def peers(self) -> list[Peer]:
        """The other regions."""
        return [peer for name, peer in self.regions.items() if name != self.name]


def _section(cls: type, values: Any, where: str):
    """An instance of the section (or table) dataclass `cls` from its values, each checked."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a table of options, not {values!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in [{where}]: {', '.join(unknown)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in values]
    if missing:
        raise ConfigError(f"[{where}] needs {' and '.join(required)}: {', '.join(missing)} missing")
    hints = typing.get_type_hints(cls)
    checked = {k: _typed(f"{where}.{k}", parse_size(v) if k in SIZES else v, hints[k]) for k, v in values.items()}
    return cls(**checked)


def _typed(key: str, value: Any, hint: Any) -> Any:
    """`value` checked against the option's declared type `hint`; ConfigError naming the key and
    the type expected. A single string where a list is expected is a one-element list."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType:  # `X | None`: TOML has no null, so the value is an X
        return _typed(key, value, next(a for a in args if a is not type(None)))
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
        return [_typed(f"{key}[{i}]", item, args[0]) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
        return {k: _typed(f"{key}.{k}", v, args[1]) for k, v in value.items()}
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return _section(hint, value, key)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
    return value


def _describe(hint: Any) -> str:
    """A type as the messages name it: `a list of strings`, `an integer`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return f"a list of {_describe(args[0]).split(' ', 1)[1]}s (or a single one)"
    if origin is dict:
        return f"a table of {_describe(args[1]).split(' ', 1)[1]}s"
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean (true or false)"}
    return names.get(hint, f"a table ({hint.__name__})")


def _override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `section.option=value` or `regions.NAME.section.option=value` (value read as
    TOML, else as a string)."""
    key, sep, text = assignment.partition("=")
    parts = [part.strip() for part in key.split(".")]
    if parts[0] == "regions" and len(parts) in (3, 4):
        place = data.setdefault("regions", {})
        for part in parts[1:-1]:
            place = place.setdefault(part, {})
            if not isinstance(place, dict):
                raise ConfigError(f"--set {key}: {part} is not a table")
    elif len(parts) == 2 and parts[0] in SECTIONS:
        place = data.setdefault(parts[0], {})
    else:
        place = None
    if not sep or place is None:
        raise ConfigError(
            f"--set wants section.option=value with a section of {', '.join(SECTIONS)}"
            f" (or regions.NAME.section.option=value): {assignment!r}"
        )
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    place[parts[-1]] = value


def load_config(path: Path | None, overrides: list[str] | None = None, region: str | None = None) -> Config:
    """The configuration in `path` (or ./cxg.toml when it exists, else the defaults), with the
    command line's `section.option=value` overrides applied. A file with `[regions.NAME]` tables
    describes several regions: this is then the configuration of `region` (default: the one
    marked `default = true`, else the first), with every region listed in `regions`."""
    data: dict[str, Any] = {}
    if path is None and DEFAULT_CONFIG.exists():
        path = DEFAULT_CONFIG
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"configuration file {path} not found") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"configuration file {path}: {e}") from e
    unknown = sorted(set(data) - set(SECTIONS) - {"regions"})
    if unknown:
        raise ConfigError(f"unknown section(s) in {path}: {', '.join(unknown)}")
    for assignment in overrides or []:
        _override(data, assignment)
    listed = data.pop("regions", {})
    if not listed:
        if region:
            raise ConfigError(f"--region {region}: the configuration describes one region (no [regions.NAME] tables)")
        config = _config(data)
        _check(config)
        if config.balancing.method != "none":
            raise ConfigError(
                f"balancing.method = {config.balancing.method!r} balances between regions, and the configuration "
                "describes none: add a [regions.NAME] table per region"
            )
        return config
    return _region_config(data, listed, region)


def _config(data: dict[str, Any]) -> Config:
    return Config(**{name: _section(cls, data.get(name, {}), name) for name, cls in SECTIONS.items()})


# `url`: where the other regions reach its gateway (default gateway.url), e.g. through a WAN link or a proxy
REGION_KEYS = {"default": bool, "databases": dict[str, list[str]], "copies_of": list[str], "url": str}


def _region_config(base: dict[str, Any], listed: Any, chosen: str | None) -> Config:
    """The configuration of region `chosen` of the `[regions.NAME]` tables `listed`: the file's
    sections, with what the region's table sets over them."""
    if not isinstance(listed, dict) or not all(isinstance(v, dict) for v in listed.values()):
        raise ConfigError("[regions] must hold one table per region: [regions.NAME]")
    configs: dict[str, Config] = {}
    peers: dict[str, Peer] = {}
    for index, (name, table) in enumerate(listed.items()):
        unknown = sorted(set(table) - set(REGION_KEYS) - set(REGION_SECTIONS))
        if unknown:
            raise ConfigError(
                f"unknown option(s) in [regions.{name}]: {', '.join(unknown)}"
                f" (a region sets {', '.join([*REGION_KEYS, *REGION_SECTIONS])})"
            )
        own = {k: _typed(f"regions.{name}.{k}", table[k], hint) for k, hint in REGION_KEYS.items() if k in table}
        merged = {section: dict(base.get(section, {})) for section in SECTIONS}
        for section in REGION_SECTIONS:
            options = table.get(section, {})
            if not isinstance(options, dict):
                raise ConfigError(f"regions.{name}.{section} must be a table of options, not {options!r}")
            merged[section].update(options)
        _separate(merged, table, name, index)
        try:
            config = _config(merged)
            _check(config)
        except ConfigError as e:
            raise ConfigError(f"region {name}: {e}") from None
        if config.gateway.port == 0:
            raise ConfigError(f"region {name}: gateway.port must be set (the other regions dial it)")
        configs[name] = config
        copies = tuple(own.get("copies_of", []))
        url = own.get("url", config.gateway.url).rstrip("/")
        peers[name] = Peer(
            name, config.gateway.region, url, own.get("databases", {}), copies, own.get("default", False)
        )
    _check_regions(peers)
    default = next((p.name for p in peers.values() if p.default), next(iter(peers)))
    peers[default] = replace(peers[default], default=True)
    chosen = chosen or default
    if chosen not in configs:
        raise ConfigError(f"--region {chosen}: no such region (the file has {', '.join(peers)})")
    config = configs[chosen]
    config.regions, config.name = peers, chosen
    return config


def _separate(merged: dict[str, Any], table: dict[str, Any], name: str, index: int) -> None:
    """What regions would otherwise share, kept apart where the region's table does not set it: its
    number (1, 2, ... in the file's order), its nodes' first port (100 apart) and data directories
    (`data/NAME/node-0`, ...)."""
    merged["gateway"].setdefault("region", index + 1)
    if "first_port" not in table.get("region", {}):
        first = merged["region"].get("first_port", RegionConfig.first_port)
        merged["region"]["first_port"] = first + 100 * index if first else 0
    if "data" not in table.get("storage", {}):
        data = merged["storage"].get("data", DEFAULT_DATA)
        data = [data] if isinstance(data, str) else data
        merged["storage"]["data"] = [str(Path(d).parent / name / Path(d).name) for d in data]


def _check_regions(peers: dict[str, Peer]) -> None:
    for number in {p.number for p in peers.values()}:
        same = [p.name for p in peers.values() if p.number == number]
        if len(same) > 1:
            raise ConfigError(f"regions {', '.join(same)} share gateway.region {number}: each needs its own")
    for url in {p.url for p in peers.values()}:
        same = [p.name for p in peers.values() if p.url == url]
        if len(same) > 1:
            raise ConfigError(f"regions {', '.join(same)} share the gateway address {url}")
    for peer in peers.values():
        strangers = [name for name in peer.copies_of if name not in peers or name == peer.name]
        if strangers:
            raise ConfigError(f"regions.{peer.name}.copies_of names no other region: {', '.join(strangers)}")
    defaults = [p.name for p in peers.values() if p.default]
    if len(defaults) > 1:
        raise ConfigError(f"one region may be the default, not {', '.join(defaults)}")


SPARK_LOG_LEVELS = ("AUTO", "ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


def _check(config: Config) -> None:
    if config.region.backend not in ("native", "mysql", "simulation"):
        raise ConfigError(f"region.backend must be native, mysql or simulation, not {config.region.backend!r}")
    if config.region.dispatch not in ("round-robin", "free-slot-first"):
        raise ConfigError(f"region.dispatch must be round-robin or free-slot-first, not {config.region.dispatch!r}")
    if config.storage.device_memory != "auto":
        try:
            parse_size(config.storage.device_memory)
        except ConfigError:
            setting = config.storage.device_memory
            raise ConfigError(f"storage.device_memory must be auto or a size, not {setting!r}") from None
    if config.spark.exchange not in ("auto", "files", "source"):
        raise ConfigError(f"spark.exchange must be auto, files or source, not {config.spark.exchange!r}")
    if config.spark.log_level.upper() not in SPARK_LOG_LEVELS:
        levels = ", ".join(SPARK_LOG_LEVELS).lower()
        raise ConfigError(f"spark.log_level must be one of {levels}, not {config.spark.log_level!r}")
    if config.spark.executor_wait <= 0:
        raise ConfigError(f"spark.executor_wait must be a positive number of seconds, not {config.spark.executor_wait}")
    if config.balancing.method not in BALANCING_METHODS:
        methods = ", ".join(BALANCING_METHODS)
        raise ConfigError(f"balancing.method must be one of {methods}, not {config.balancing.method!r}")
    if config.balancing.weight not in BALANCING_WEIGHTS:
        raise ConfigError(f"balancing.weight must be printed or per-server, not {config.balancing.weight!r}")
    if not 0 <= config.gateway.region < 100:
        raise ConfigError(f"gateway.region must be in 0..99, not {config.gateway.region}")
    if config.gateway.log_format not in LOG_FORMATS:
        raise ConfigError(f"gateway.log_format must be json or text, not {config.gateway.log_format!r}")
    if config.gateway.drain_timeout < 0:
        raise ConfigError(f"gateway.drain_timeout must be 0 or more seconds, not {config.gateway.drain_timeout}")
    names = [t.name for t in config.gateway.tokens]
    if len(set(names)) != len(names) or len({t.token for t in config.gateway.tokens}) != len(names):
        raise ConfigError("[[gateway.tokens]] names and tokens must be unique")
