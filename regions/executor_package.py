"""The project as a Spark cluster's executors import it: a zip of its packages, handed to Spark on
``spark.submit.pyFiles`` (Spark copies it to every executor and puts it first on its Python
path). The executors' Python needs the project's dependencies (pyarrow, numpy, zstandard,
sqlglot), as the Spark image in ``docker/`` has them; the project itself travels with the
application, so executors always run the driver's version of it."""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("gpu_kernels", "storage", "balancer", "gateway", "regions")  # what executors may import
STAMP = (1980, 1, 1, 0, 0, 0)  # one date for every entry: the same sources make the same zip


def _files() -> list[tuple[str, Path]]:
    """(name in the zip, file) of every source and data file of `PACKAGES`."""
    found = []
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append((f"{package}/{path.relative_to(root).as_posix()}", path))
    return found


def project_zip(directory: str | None = None) -> Path:
    """The zip of the project's packages, named by a digest of their contents, in `directory`
    (default: the temp dir); made once per version of the sources, atomically."""
    files = _files()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    target = Path(directory or tempfile.gettempdir()) / f"cxg-executors-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    handle, partial = tempfile.mkstemp(prefix=".cxg-executors-", suffix=".zip", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, path in files:
                archive.writestr(zipfile.ZipInfo(name, STAMP), path.read_bytes(), zipfile.ZIP_DEFLATED)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would keep it from another user with the same sources
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target
