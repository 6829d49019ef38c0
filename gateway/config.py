"""Configuration: one TOML file, every option overridable on the command line."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path("cxg.toml")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", re.IGNORECASE)


class ConfigError(ValueError):
    code = "invalid_config"


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


@dataclass
class StorageConfig:
    data: list[str] = field(default_factory=lambda: ["data/node-0"])  # one directory per node
    block_budget: int = 64 * 1024 * 1024  # BS: bytes of one decoded block
    compression: str = "zstd"  # block files on disk: zstd or none
    buckets: int = 16  # hash buckets of hash-placed tables
    zstd_strings: bool = True  # keep free-text strings zstd-compressed in memory
    backend: str = "auto"  # scan kernels: auto (CuPy when a CUDA device is present), numpy or cupy
    ingest: str = "spark"  # cxg load: spark (the ingest pipeline) or local (in this process)


@dataclass
class SparkConfig:
    master: str = "local[*]"  # or spark://host:7077, yarn, ...
    driver_memory: str = "4g"
    shuffle_partitions: int | None = None  # default: the cores of a local master
    broadcast_threshold: str = "10MB"
    adaptive: bool = False  # spark.sql.adaptive.enabled
    conf: dict[str, str] = field(default_factory=dict)  # any other spark.* option

    def settings(self):
        from regions.spark_session import SparkSettings

        return SparkSettings(
            master=self.master,
            driver_memory=self.driver_memory,
            shuffle_partitions=self.shuffle_partitions,
            broadcast_threshold=self.broadcast_threshold,
            adaptive=self.adaptive,
            conf=dict(self.conf),
        )


@dataclass
class Config:
    storage: StorageConfig = field(default_factory=StorageConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)


def _section(cls: type, values: dict[str, Any], where: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in [{where}]: {', '.join(unknown)}")
    if "block_budget" in values:
        values = {**values, "block_budget": parse_size(values["block_budget"])}
    return cls(**values)


def load_config(path: Path | None) -> Config:
    """The configuration in `path` (or ./cxg.toml when it exists), else the defaults."""
    if path is None:
        if not DEFAULT_CONFIG.exists():
            return Config()
        path = DEFAULT_CONFIG
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"configuration file {path}: {e}") from e
    unknown = sorted(set(data) - {"storage", "spark"})
    if unknown:
        raise ConfigError(f"unknown section(s) in {path}: {', '.join(unknown)}")
    return Config(
        storage=_section(StorageConfig, data.get("storage", {}), "storage"),
        spark=_section(SparkConfig, data.get("spark", {}), "spark"),
    )
