"""Memory budgets: what a node process may hold privately, and what stays outside (the block files
it maps, shared with its scan workers through the page cache)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gateway import ApiError
from regions import NODE_SHARES, load_config, machine_memory, node_memory_budget
from regions.memory_budgets import SMALLEST_PART, SYSTEM_SHARE, jvm_bytes
from storage import OUT_OF_MEMORY, ConfigError, NodeError


def test_a_budget_bounds_private_memory_but_not_mapped_block_files(tmp_path: Path) -> None:
    """Past its budget a private allocation fails with MemoryError and the process goes on; a mapped
    file four times the room left is read whole."""
    block = tmp_path / "block.ipc"
    np.arange(256 * 2**20, dtype=np.uint8).tofile(block)  # 256 MiB
    script = textwrap.dedent(
        f"""
        import numpy as np, pyarrow as pa
        from storage import limit_private_memory, private_memory_limit
        status = open("/proc/self/status").read()
        used = int(status.split("VmData:")[1].split()[0]) * 1024
        limit_private_memory(used + 64 * 2**20)
        assert private_memory_limit() == used + 64 * 2**20
        mapped = np.frombuffer(pa.memory_map({str(block)!r}).read_buffer(), dtype=np.uint8)
        print("mapped", int(mapped[255::256].astype(np.int64).sum()))
        try:
            np.ones(256 * 2**20, np.uint8)
            print("allocated past the budget")
        except MemoryError:
            print("refused")
        print("goes on", int(np.ones(2**20, np.uint8).sum()))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split("\n")[:3] == [f"mapped {255 * 2**20}", "refused", f"goes on {2**20}"]


def test_the_budget_setting_none_a_size_or_derived_from_the_machine() -> None:
    def budget(*sets: str, nodes: int = 2, with_spark: bool = True) -> int | None:
        return node_memory_budget(load_config(None, list(sets)), nodes, with_spark)

    assert budget('storage.node_memory="none"') is None
    assert budget('storage.node_memory="3GiB"') == 3 * 2**30
    with pytest.raises(ConfigError, match="not a size"):
        budget('storage.node_memory="lots"')
    with pytest.raises(ConfigError, match="driver_memory"):
        budget('spark.driver_memory="big"')
    alone, shared = budget(nodes=1, with_spark=False), budget('spark.driver_memory="2g"', nodes=2)
    assert alone is not None and shared is not None and alone > shared >= NODE_SHARES * SMALLEST_PART
    sizes = [jvm_bytes(s) for s in ("2g", "2gb", "512m", "2048", "1t")]  # a bare number is MiB, as in Spark
    assert sizes == [2 * 2**30, 2 * 2**30, 2**29, 2 * 2**30, 2**40]
    assert alone <= machine_memory() * (1 - SYSTEM_SHARE)


def test_a_scan_past_a_node_budget_is_a_503_out_of_memory_not_an_execution_error() -> None:
    failure = NodeError(OUT_OF_MEMORY, "the scan of lineitem needed more memory than node node-0 may hold")
    error = ApiError.of(failure, query=True)
    assert (error.status, error.code, error.retry_after) == (503, "out_of_memory", None)
    assert "lineitem" in error.message and "node-0" in error.message
