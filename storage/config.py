"""Storage's section of the configuration, and what every floor's sections share: the error a
wrong value raises and the sizes options are written in.

Storage is the lowest floor with a section, so the configuration's error and its sizes live here,
where every section above may use them. The file that holds the sections, and the typed reading
of each, are composed on the regions floor (`regions.config`). Each option documents itself in
its field's metadata (`doc`), from which `cxg config defaults` prints the default configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", re.IGNORECASE)

Size = Annotated[int, "size"]  # bytes, which a file writes as 123, 64MiB, 1.5GB or 512k (`parse_size`)


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


def format_size(n: float) -> str:
    """`n` bytes as people read them: 950 B, 1.25 MB (powers of 1000, as `parse_size` reads them)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


DEFAULT_DATA = ["data/node-0", "data/node-1"]  # where `cxg load`, `cxg storage`, `cxg up` and `cxg demo` meet
INGEST_ENGINES = ("auto", "local", "spark")


@dataclass
class StorageConfig:
    """Where the nodes keep their tables, how blocks are cut and compressed, and what a node may hold.

    A node's memory "auto" is the machine's, less Spark's driver and the system's share, over the region's nodes
    (`regions.memory_budgets`)."""

    data: list[str] = field(
        default_factory=lambda: list(DEFAULT_DATA),
        metadata={"doc": 'one directory per native node (a single "dir" is ["dir"])'},
    )
    block_budget: Size = field(
        default=64 * 1024 * 1024,
        metadata={"doc": "BS, bytes of one decoded block (with GPUs, cxg load takes it from a slot's decoded area)"},
    )
    compression: str = field(default="zstd", metadata={"doc": "block files on disk: zstd or none"})
    buckets: int = field(default=16, metadata={"doc": "hash buckets of hash-placed tables"})
    zstd_strings: bool = field(
        default=True, metadata={"doc": "keep free-text columns zstd-compressed in memory until projected"}
    )
    backend: str = field(
        default="auto", metadata={"doc": "scan kernels: auto (CuPy when a CUDA device is present), numpy or cupy"}
    )
    ingest: str = field(
        default="auto",
        metadata={
            "doc": "cxg load: local (in this process, a hash-placed table streamed by bucket), spark (the ingest "
            "pipeline, a Spark job) or auto (local into this host's data directories, spark with --live)"
        },
    )
    replicate_below: float = field(
        default=0.25,
        metadata={
            "doc": "cxg load without --placement: a table smaller than this share of a node's memory budget is "
            "replicated on every node (a node answers its queries whole), a larger one hash-placed"
        },
    )
    scan_processes: int = field(
        default=0,
        metadata={
            "doc": "CPU scan worker processes per node (0: worker threads, measured faster on whole queries "
            "on a 2-core machine, docs/kernels.md)"
        },
    )
    node_memory: str = field(
        default="auto",
        metadata={"doc": "private memory of a node process (each scan worker: a third): auto, a size or none"},
    )
    device_memory: str = field(
        default="auto",
        metadata={"doc": "memory of each GPU a node's scans share (four areas of a fourth): auto (90%) or a size"},
    )

    def check(self) -> None:
        if self.ingest not in INGEST_ENGINES:
            raise ConfigError(f"storage.ingest must be one of {', '.join(INGEST_ENGINES)}, not {self.ingest!r}")
        if self.scan_processes < 0:
            raise ConfigError(f"storage.scan_processes is a count of processes, not {self.scan_processes}")
        if not 0 <= self.replicate_below <= 1:
            raise ConfigError(f"storage.replicate_below is a share from 0 to 1, not {self.replicate_below}")
        if self.device_memory != "auto":
            try:
                parse_size(self.device_memory)
            except ConfigError:
                raise ConfigError(f"storage.device_memory must be auto or a size, not {self.device_memory!r}") from None
