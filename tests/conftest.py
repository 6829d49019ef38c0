"""Shared fixtures: TPC-H SF 0.01 generated once per session, temporary stores, the gpu marker."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from storage import tpch

TPCH_SF = 0.01


def _cuda_available() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device with CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tpch_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """All 8 TPC-H tables at SF 0.01 as Parquet files."""
    return tpch.generate(TPCH_SF, tmp_path_factory.mktemp("tpch"))
