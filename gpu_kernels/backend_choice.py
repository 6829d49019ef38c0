"""Which backend the kernels run on: CuPy when a CUDA device is present, unless configured
otherwise, and never a silent fallback: asking for ``cupy`` without a device is an error.

The one module that knows both backends, above them; CuPy itself is imported only once a device
is looked for, so the kernels load where the ``gpu`` extra is not installed.
"""

from __future__ import annotations

import importlib.util

from gpu_kernels.backend import BackendUnavailable, NumpyBackend
from gpu_kernels.cupy_backend import CupyBackend


def cuda_available() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy  # the gpu extra, optional: asked only once it is installed

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


_BACKENDS: dict[str, NumpyBackend] = {}


def get_backend(name: str = "auto") -> NumpyBackend:
    """`numpy`, `cupy`, or `auto` (CuPy when a CUDA device is present, else NumPy)."""
    if name == "auto":
        name = "cupy" if cuda_available() else "numpy"
    if name not in ("numpy", "cupy"):
        raise BackendUnavailable(f"unknown backend {name!r}: use numpy, cupy or auto")
    if name not in _BACKENDS:
        if name == "cupy":
            if not cuda_available():
                raise BackendUnavailable("backend cupy was asked for, but CuPy finds no CUDA device")
            _BACKENDS[name] = CupyBackend()
        else:
            _BACKENDS[name] = NumpyBackend()
    return _BACKENDS[name]
