"""Each package's public face (`__all__`) holds, and the faces and clients stay cheap to import.

Other packages import a package through its face, so a name listed there that no longer
resolves breaks them; the lazy faces (PEP 562) promise that importing the package, or one of
the Python clients, loads nothing it does not need: no HTTP server, no Spark, no kernels.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["gpu_kernels", "storage", "balancer", "gateway", "regions", "loadtests", "cxg"]
CLIENTS = ["gateway.dbapi", "gateway.sqlalchemy_dialect", "storage.node_client"]
SERVER = [
    "aiohttp.web",
    "gateway.server",
    "pyspark",
    "gpu_kernels",
    "storage.node",
    "storage.scan",
    "storage.scan_workers",
    "storage.scan_typing",
]


def _loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module`."""
    probe = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def _within(module: str, packages: list[str]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_of_a_face_resolves(package: str) -> None:
    face = importlib.import_module(package)
    assert face.__all__ == sorted(set(face.__all__)), "a face lists each name once, sorted"
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert not missing


@pytest.mark.parametrize("package", PACKAGES)
def test_a_lazy_face_names_each_name_once(package: str) -> None:
    face = importlib.import_module(package)
    listed = [name for names in face._FACE.values() for name in names]
    assert len(listed) == len(set(listed))
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_lazy_face_loads_none_of_its_modules(package: str) -> None:
    loaded = _loaded_by(package)
    assert package in loaded
    assert not {m for m in loaded if m.startswith(f"{package}.")}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_client_imports_nothing_of_the_server(client: str) -> None:
    loaded = _loaded_by(client)
    assert client in loaded
    assert not {m for m in loaded if _within(m, SERVER)}
    assert not {m for m in loaded if _within(m, ["balancer", "regions", "loadtests", "cxg"])}


def test_the_coordinators_sql_code_loads_none_of_the_nodes_server() -> None:
    """Through the lazy storage face import-linter sees no edge: check what the engine really loads."""
    loaded = _loaded_by("gateway.sql.engine")
    assert "gateway.sql.execute" in loaded and "storage.node_client" in loaded
    assert not {m for m in loaded if _within(m, ["storage.node", "storage.scan", "storage.scan_workers"])}


@pytest.mark.parametrize("module", ["gateway.sql.engine", "benchmarks.bench_gpu"])
def test_spark_is_loaded_only_when_a_query_needs_it(module: str) -> None:
    """The engine answers single-node queries without Spark, and a GPU machine may have none
    installed: the GPU benchmark, which goes through the engine, must import there."""
    assert not {m for m in _loaded_by(module) if _within(m, ["pyspark", "py4j", "storage.spark_source"])}
