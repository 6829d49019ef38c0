"""The configuration of the whole system: one TOML file, every option overridable on the command line.

Each floor owns its sections (`storage.StorageConfig`, `balancer.simulation.SimulationConfig`,
`gateway.GatewayConfig`, `gateway.SparkSettings` and `gateway.SqlSettings`, this floor's `[region]` and `[balancing]`);
this module puts them in one file, reads each with `regions.section_reader`, checks each section
and what spans them, and composes a file of several regions (`[regions.NAME]` tables).
"""

from __future__ import annotations

import tomllib
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from balancer import SimulationConfig
from gateway import GatewayConfig, SparkSettings, SqlSettings
from regions.section_reader import read_section
from regions.sections import BalancingConfig, Peer, RegionConfig, RegionTable
from storage import DEFAULT_DATA, ConfigError, StorageConfig

DEFAULT_CONFIG = Path("cxg.toml")


@dataclass
class Config:
    """The whole system's configuration: a section per part, each the class of the floor that owns it,
    and in a file of several regions, every region (`regions`) and which one this is (`name`)."""

    storage: StorageConfig = field(default_factory=StorageConfig)
    spark: SparkSettings = field(default_factory=SparkSettings)
    sql: SqlSettings = field(default_factory=SqlSettings)
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


SECTIONS: dict[str, type] = {name: hint for name, hint in typing.get_type_hints(Config).items() if is_dataclass(hint)}
REGION_SECTIONS = ("storage", "spark", "sql", "gateway", "region", "simulation")  # what a [regions.NAME] table may set
REGION_KEYS = tuple(f.name for f in fields(RegionTable))


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
    return Config(**{name: read_section(cls, data.get(name, {}), name) for name, cls in SECTIONS.items()})


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
        own = read_section(RegionTable, {k: v for k, v in table.items() if k in REGION_KEYS}, f"regions.{name}")
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
        url = (own.url or config.gateway.url).rstrip("/")
        peers[name] = Peer(name, config.gateway.region, url, own.databases, tuple(own.copies_of), own.default)
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


def _check(config: Config) -> None:
    """Each section's own checks: the first that fails is reported."""
    for section in (config.region, config.storage, config.spark, config.balancing, config.gateway):
        section.check()
