"""The regions floor's sections of the configuration: `[region]` (what `cxg up` starts),
`[balancing]` (between the regions of a file), and what a `[regions.NAME]` table of a file of
several regions says of its region besides the sections it sets (`RegionTable`), with the region
as the others see it (`Peer`). Each option documents itself in its field's metadata (`doc`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from regions.balancing import METHODS, WEIGHTS
from storage import ConfigError

BACKENDS = ("native", "mysql", "simulation")
DISPATCHES = ("round-robin", "free-slot-first")


@dataclass
class RegionConfig:
    """What `cxg up` starts: the region's nodes (and routers) as processes on this machine.

    An overloaded region says so in its log, on /v1/regions/load and in its metrics (`regions.region_load`)."""

    backend: str = field(
        default="native",
        metadata={"doc": "native (a storage node per storage.data directory), mysql or simulation"},
    )
    nodes: int = field(default=2, metadata={"doc": "mysql and simulation nodes"})
    slots: int = field(default=0, metadata={"doc": "K, query slots per node; 0: the machine's cores"})
    routers: int = field(default=0, metadata={"doc": "0: nodes join the gateway; R: R routers share the nodes"})
    mysql_url: str = field(default="mysql://root@127.0.0.1:3306/tpch", metadata={"doc": "the mysql nodes' database"})
    first_port: int = field(default=8101, metadata={"doc": "nodes and routers listen from this port on (0: any free)"})
    dispatch: str = field(
        default="round-robin",
        metadata={
            "doc": "round-robin (PerformSys), or free-slot-first: skip members whose slots are all busy while"
            " one has a free slot"
        },
    )
    overload_weight: float = field(
        default=0.0,
        metadata={"doc": "queue weight (queued volume per server) above which, for overload_seconds, it is overloaded"},
    )
    overload_seconds: float = field(
        default=30.0, metadata={"doc": "how long the weight stays above overload_weight (<= 0: never overloaded)"}
    )

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"region.backend must be native, mysql or simulation, not {self.backend!r}")
        if self.dispatch not in DISPATCHES:
            raise ConfigError(f"region.dispatch must be round-robin or free-slot-first, not {self.dispatch!r}")


@dataclass
class BalancingConfig:
    """Balancing between the regions of a file with `[regions.NAME]` tables (seed 004 §5.2)."""

    method: str = field(
        default="none", metadata={"doc": "none, centralized, decentralized or idle-pull (regions.balancing)"}
    )
    weight: str = field(
        default="printed",
        metadata={"doc": "W_r as seed 004 prints it (mean volume of a queued query), or per-server (without L_r)"},
    )
    poll: float = field(default=0.5, metadata={"doc": "seconds between looks at the other regions' queues"})
    peer_timeout: float = field(
        default=5.0,
        metadata={"doc": "seconds a region may stay silent before the queries it took from others go home"},
    )
    host: str = field(default="127.0.0.1", metadata={"doc": "centralized: the central balancer's address"})
    port: int = field(
        default=8090,
        metadata={"doc": "centralized: the central balancer's port (cxg balance-regions, started by cxg up)"},
    )

    def check(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"balancing.method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.weight not in WEIGHTS:
            raise ConfigError(f"balancing.weight must be printed or per-server, not {self.weight!r}")


@dataclass
class RegionTable:
    """What a `[regions.NAME]` table says of its region, besides the sections it sets over the file's."""

    default: bool = field(default=False, metadata={"doc": "the region of commands run without --region"})
    databases: dict[str, list[str]] = field(
        default_factory=dict, metadata={"doc": "database -> the tables this region holds"}
    )
    copies_of: list[str] = field(
        default_factory=list,
        metadata={"doc": "regions whose databases it keeps copies of (their queries may run here)"},
    )
    url: str = field(
        default="",
        metadata={"doc": "where the other regions reach its gateway (default: its gateway.url)"},
    )


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
