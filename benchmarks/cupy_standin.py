"""A strict stand-in for CuPy, to run the CuPy backend and the device pipeline where no GPU is.

It is NumPy underneath, and as strict as CuPy where CuPy is strict:

- **Its surface is the installed real wheel's** (`cupy-cuda12x`, pinned; it imports without a
  driver): a name the real `cupy`, `cupyx`, `cupy.cuda` or `cupy.ndarray` lacks is an
  AttributeError, a keyword argument the real function or method does not take is a TypeError.
- **Host and device do not mix**: a device array refuses implicit conversion (`__array__`, so
  `numpy.asarray`, `pyarrow.array` and NumPy functions fail on it as on CuPy), a NumPy array given
  where a device array is wanted is a TypeError, and an array is used only on the device it lives on.
- **Streams, events and pools are modelled**: every operation runs on the current device's current
  stream and reads arrays that other streams wrote only after a wait on an event recorded after
  the write (or a host synchronization); a pinned host buffer must outlive its asynchronous copy;
  memory pools and each device's memory have limits (`OutOfMemoryError` past them).
- **Raw CUDA kernels run their own source** (`cupy.RawModule`), compiled as C++ on the CPU by g++
  through a small shim (with `sanitize`, under AddressSanitizer and UndefinedBehaviorSanitizer): a
  kernel whose threads synchronize (`__syncthreads`, shared memory, warp shuffles and ballots)
  runs each CUDA block's threads as fibers on the launching thread, one block after another, each
  thread running until it meets the others (at `__syncthreads`, or its warp's lanes at a shuffle,
  which they exchange values through; whole warps only, as the kernels call them); any other runs
  the grid's blocks and threads in loops. Their pointer
  arguments are read after their writes, like any operation's.
- **What happened is counted** (`StandIn.counts`): launches, host synchronizations, bytes moved
  each way, per device.

What it proves: that the code uses CuPy's API as CuPy has it, with the dtypes it accepts, that its
logic gives NumPy's answers, and that the stream dependencies written in it order every read after
its write, and that the threads of a CUDA block meet at its barriers. What it cannot: real
concurrency between streams, warps running in lockstep, speed, or the device's own memory behaviour
beyond the limits modelled.

    with installed(devices=2) as standin:   # `import cupy` now gives the stand-in
        backend = get_backend("cupy")
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import hashlib
import importlib.machinery
import inspect
import itertools
import re
import subprocess
import sys
import tempfile
import threading
import time
import types
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpu_kernels import backend_choice

# ---- the real wheel's surface ----------------------------------------------------------------------

_NO_SIGNATURE = object()  # a callable whose parameters cannot be read: any keyword passes


def _parameters(obj: Any) -> set[str] | object:
    """The keyword parameters a real CuPy callable takes (from its signature, or for Cython
    methods the first line of its docstring); `_NO_SIGNATURE` when neither tells."""
    try:
        params = inspect.signature(obj).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return _NO_SIGNATURE
        return {p.name for p in params if p.kind is not p.VAR_POSITIONAL} - {"self"}
    except (TypeError, ValueError):
        pass
    first = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    match = re.match(r"[\w.]+\((.*)\)", first[0]) if first else None
    if match is None or "**" in match[1]:
        return _NO_SIGNATURE
    names = set()
    for part in match[1].replace("\\", "").split(","):
        words = part.split("=")[0].split()  # Cython writes types before names: "str code=None"
        names.add(words[-1].lstrip("*") if words else "")
    return names - {"self", "", "/"}


@functools.cache
def surface() -> dict[str, Any]:
    """The names and parameters of the installed real CuPy, read once."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ("cupy", "cupyx")}
    try:
        import cupy  # the real CuPy (the gpu extra), imported with the stand-in's modules put aside
        import cupyx

        real = {
            "cupy": {n: getattr(cupy, n) for n in dir(cupy) if not n.startswith("_")},
            "cupyx": {n: getattr(cupyx, n) for n in dir(cupyx) if not n.startswith("_")},
            "cuda": {n: getattr(cupy.cuda, n) for n in dir(cupy.cuda) if not n.startswith("_")},
            "runtime": {n for n in dir(cupy.cuda.runtime) if not n.startswith("_")},
            "ndarray": {n: getattr(cupy.ndarray, n) for n in dir(cupy.ndarray) if not n.startswith("_")},
            "ufunc": {n for n in dir(cupy.add) if not n.startswith("_")},
            "version": cupy.__version__,
        }
        real["params"] = {
            key: _parameters(value)
            for space in ("cupy", "cupyx", "ndarray")
            for name, value in real[space].items()
            if callable(value)
            for key in [f"{space}.{name}"]
        }
        for name in ("Stream", "Event", "MemoryPool", "Device"):
            cls = real["cuda"][name]
            real["params"][f"cuda.{name}"] = _parameters(cls)
            for method in dir(cls):
                if not method.startswith("_") and callable(getattr(cls, method)):
                    real["params"][f"cuda.{name}.{method}"] = _parameters(getattr(cls, method))
        return real
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in ("cupy", "cupyx")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _check_keywords(key: str, kwargs: dict[str, Any]) -> None:
    allowed = surface()["params"].get(key, _NO_SIGNATURE)
    if allowed is _NO_SIGNATURE:
        return
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{key}() got an unexpected keyword argument {unknown[0]!r} (the real CuPy takes none such)")


# ---- errors as CuPy raises them ------------------------------------------------------------------


POISON = 0xAB  # every byte of a new array from cupy.empty: an output a kernel leaves unwritten shows


class OutOfMemoryError(MemoryError):
    def __init__(self, size: int, total: int, limit: int):
        super().__init__(
            f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, limit {limit:,})."
        )


class CUDARuntimeError(RuntimeError):
    """What CUDA's runtime calls raise (cudaErrorMemoryAllocation where the host has no more to pin)."""


class StreamOrderError(AssertionError):
    """A read that no wait orders after its write, or a host buffer released under a copy."""


class InexactOnDevice(AssertionError):
    """An operation the real CuPy takes but answers inexactly on a GPU (seen on one), refused here
    so that no code comes to rely on it."""


# ---- streams, events, devices, pools ----------------------------------------------------------------


_STREAM_KEYS = itertools.count(1)


class _Stream:
    """A stream of one device: its operations in order, and how far it has waited for others."""

    def __init__(self, standin: StandIn, device: int, blocking: bool, null: bool = False):
        self.standin, self.device, self.blocking, self.null = standin, device, blocking, null
        self.key = next(_STREAM_KEYS)  # never reused, unlike id(): a new stream knows nothing done of an old one
        self.seq = 0
        self.seen: dict[int, int] = {}  # stream.key -> the last of its operations ordered before ours
        self._stack: list[Any] = []

    # the real Stream's API
    def record(self, event: _Event | None = None) -> _Event:
        event = event or _Event()
        event.record(self)
        return event

    def wait_event(self, event: _Event) -> None:
        if event.stream is None:
            return
        for stream_id, seq in event.seen.items():
            self.seen[stream_id] = max(self.seen.get(stream_id, 0), seq)

    def synchronize(self) -> None:
        self.standin.host_waits(self)

    @property
    def done(self) -> bool:
        return True

    def use(self) -> _Stream:
        self.standin.state().streams[self.device] = self
        return self

    def __enter__(self) -> _Stream:
        state = self.standin.state()
        self._stack.append(state.streams.get(self.device))
        state.streams[self.device] = self
        return self

    def __exit__(self, *exc: object) -> None:
        self.standin.state().streams[self.device] = self._stack.pop()

    # the model
    def step(self) -> tuple[_Stream, int]:
        """One more operation on this stream; after every operation the null stream and blocking
        streams had before it (legacy default-stream semantics)."""
        self.seq += 1
        if self.blocking:
            for other in self.standin.blocking_streams(self.device):
                if other is not self:
                    self.seen[other.key] = max(self.seen.get(other.key, 0), other.seq)
        return self, self.seq

    def ordered_after(self, stream: _Stream, seq: int) -> bool:
        if stream is self:
            return True
        return self.seen.get(stream.key, 0) >= seq or self.standin.host_seen.get(stream.key, 0) >= seq


class _Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.stream: _Stream | None = None
        self.seen: dict[int, int] = {}
        self.timing = not disable_timing
        self.time = 0.0  # when it was recorded: the stand-in runs the work eagerly, so this is host time

    def record(self, stream: _Stream | None = None) -> None:
        stream = stream or _STANDIN.current_stream()
        self.stream = stream
        self.seen = {**stream.seen, stream.key: stream.seq}
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        if self.stream is not None:
            _STANDIN.host_waits_for(self.seen)

    @property
    def done(self) -> bool:
        """Whether the event has passed (cudaEventQuery). The stand-in runs work eagerly, so it has,
        and the host that asked knows it without a wait; with `StandIn.slow_device`, as on a device
        still busy, only once the host has waited for it."""
        if self.stream is None:
            return True
        if _STANDIN.slow_device:
            return all(_STANDIN.host_seen.get(stream, 0) >= seq for stream, seq in self.seen.items())
        _STANDIN.host_knows(self.seen)
        return True


def _elapsed_time(start: _Event, end: _Event) -> float:
    """Milliseconds between two recorded events, as CUDA's: both must have timing and be done (the
    host has synchronized with them), else it fails as CUDA does."""
    if not (start.timing and end.timing) or start.stream is None or end.stream is None:
        raise RuntimeError("cudaErrorInvalidResourceHandle: an event without timing, or never recorded")
    if any(_STANDIN.host_seen.get(s, 0) < seq for event in (start, end) for s, seq in event.seen.items()):
        raise RuntimeError("cudaErrorNotReady: synchronize with the events before reading their time")
    return (end.time - start.time) * 1000


class _Pool:
    """A memory pool: its arrays' bytes against its limit (and the device's memory)."""

    def __init__(self) -> None:
        self.used = 0
        self.peak = 0  # the most it held at once (the stand-in's own, for tests)
        self.limit = 0  # 0: none of its own

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        if fraction is not None:
            size = int(_STANDIN.memory * fraction)
        self.limit = int(size or 0)

    def get_limit(self) -> int:
        return self.limit

    def used_bytes(self) -> int:
        return self.used

    def total_bytes(self) -> int:
        return self.used

    def free_all_blocks(self, stream: Any = None) -> None:
        pass

    def malloc(self, size: int) -> None:
        raise NotImplementedError("the stand-in allocates through using_allocator(pool.malloc) only")


@dataclass
class _ThreadState:
    device: int = 0
    streams: dict[int, _Stream] = field(default_factory=dict)  # device -> current stream
    pool: _Pool | None = None


class _Device:
    def __init__(self, device: int | None = None):
        self.id = _STANDIN.state().device if device is None else int(device)
        if not 0 <= self.id < _STANDIN.devices:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id}")
        self._previous: list[int] = []

    def use(self) -> None:
        _STANDIN.state().device = self.id

    def synchronize(self) -> None:
        for stream in _STANDIN.all_streams(self.id):
            _STANDIN.host_waits(stream)

    def __enter__(self) -> _Device:
        state = _STANDIN.state()
        self._previous.append(state.device)
        state.device = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        _STANDIN.state().device = self._previous.pop()


# ---- device arrays -----------------------------------------------------------------------------------


def _refused(value: Any) -> TypeError:
    return TypeError(f"Unsupported type {type(value)} (a NumPy array where CuPy wants a device array)")


class ndarray:
    """A device array: NumPy data that only device operations may touch."""

    __array_priority__ = 100

    def __init__(self, data: np.ndarray, device: int, written: tuple[_Stream, int], pool: _Pool | None):
        self._data = data
        self._device = device
        self._written = written
        if pool is not None:
            nbytes = data.nbytes
            pool.used += nbytes
            pool.peak = max(pool.peak, pool.used)
            weakref.finalize(self, _release, pool, nbytes)

    # -- what CuPy refuses --------------------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array "
            "explicitly."
        )

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if ufunc.__name__ not in surface()["cupy"]:
            return NotImplemented
        target = getattr(_STANDIN.module, ufunc.__name__)
        return target(*inputs, **kwargs) if method == "__call__" else getattr(target, method)(*inputs, **kwargs)

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        name = func.__name__
        if name not in surface()["cupy"]:
            raise TypeError(f"numpy.{name} has no CuPy counterpart: it cannot take device arrays")
        return getattr(_STANDIN.module, name)(*args, **kwargs)

    # -- plain attributes ----------------------------------------------------------------------------
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    size = property(lambda self: self._data.size)
    ndim = property(lambda self: self._data.ndim)
    nbytes = property(lambda self: self._data.nbytes)
    itemsize = property(lambda self: self._data.itemsize)
    strides = property(lambda self: self._data.strides)
    device = property(lambda self: _Device(self._device))

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"standin.ndarray(device={self._device}, shape={self.shape}, dtype={self.dtype})"

    # -- values to the host (each a synchronization) -----------------------------------------------------
    def get(
        self, stream: _Stream | None = None, order: str = "C", out: Any = None, blocking: bool = True
    ) -> np.ndarray:
        if out is not None:  # as the real one checks it
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained from cupy.ndarray")
            if out.dtype != self.dtype:
                raise TypeError(f"{out.dtype} array cannot be obtained from {self.dtype} array")
            if out.shape != self.shape:
                raise ValueError(f"Shape mismatch. Expected shape: {self.shape}, actual shape: {out.shape}")
            if not (out.flags.c_contiguous or out.flags.f_contiguous):
                raise RuntimeError("Non-contiguous array is not supported")
        return _STANDIN.to_host(self, stream, blocking, out)

    def item(self) -> Any:
        return _STANDIN.to_host(self, None, True).item()

    def tolist(self) -> Any:
        return _STANDIN.to_host(self, None, True).tolist()

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise TypeError("only integer arrays can be used as an index")
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __iter__(self) -> Iterator[ndarray]:
        for i in range(len(self)):
            yield self[i]

    # -- values from the host -------------------------------------------------------------------------
    def set(self, arr: np.ndarray, stream: _Stream | None = None) -> None:
        _STANDIN.from_host(self, arr, stream)

    # -- everything else runs on the device ----------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in surface()["ndarray"]:
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        method = getattr(self._data, name, None)
        if method is None:
            raise NotImplementedError(f"the stand-in has no ndarray.{name}")
        if not callable(method):
            return _STANDIN.run(lambda: method, f"ndarray.{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            _check_keywords(f"ndarray.{name}", kwargs)
            return _STANDIN.run(
                lambda *a, **k: getattr(_STANDIN.read(self), name)(*a, **k), f"ndarray.{name}", *args, **kwargs
            )

        return call

    def __getitem__(self, key: Any) -> Any:
        return _STANDIN.run(lambda k: _STANDIN.read(self)[k], "getitem", _STANDIN.uploaded(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        _STANDIN.write(
            self, lambda k, v: self._data.__setitem__(k, v), _STANDIN.uploaded(key), _STANDIN.uploaded(value)
        )


def _release(pool: _Pool, nbytes: int) -> None:
    pool.used -= nbytes


def _operator(name: str):
    def op(self: ndarray, *others: Any) -> Any:
        return _STANDIN.run(lambda *o: getattr(_STANDIN.read(self), name)(*o), name, *others)

    return op


for _name in [
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pow__",
    "__rpow__",
    "__and__",
    "__rand__",
    "__or__",
    "__ror__",
    "__xor__",
    "__rxor__",
    "__lshift__",
    "__rlshift__",
    "__rshift__",
    "__rrshift__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__invert__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
]:
    setattr(ndarray, _name, _operator(_name))
ndarray.__hash__ = None  # type: ignore[assignment]


def _inplace(name: str):
    def op(self: ndarray, other: Any) -> ndarray:
        _STANDIN.write(self, lambda o: getattr(self._data, name)(o), other)
        return self

    return op


for _name in [
    "__iadd__",
    "__isub__",
    "__imul__",
    "__itruediv__",
    "__ifloordiv__",
    "__iand__",
    "__ior__",
    "__ixor__",
    "__ilshift__",
    "__irshift__",
]:
    setattr(ndarray, _name, _inplace(_name))


_BUILT: dict[str, ctypes.CDLL] = {}
_BUILD_DIR = Path(tempfile.gettempdir()) / "cxg-standin-kernels"


# ---- RawModule and RawKernel: CUDA C run on the CPU ---------------------------------------------------

# The runtime every kernel library links to, built once: a CUDA block's threads as fibers, where they meet.
_CUDA_RUNTIME = r"""
#include <mutex>
#include <ucontext.h>
#include <vector>
struct dim3 { unsigned int x, y, z; };
thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;
// A CUDA block's threads as fibers on the launching thread: each runs until it reaches a point
// where threads meet (`__syncthreads`, a warp's exchange), then the next runs. Every pass over the
// fibers brings each to its next meeting point; a warp's lanes, convergent, reach the same one, so
// one pass is one warp barrier; fibers at `__syncthreads` wait until every fiber is there.
enum State { READY, AT_WARP, AT_BLOCK, DONE };
struct Fiber {
    ucontext_t context;
    State state = READY;
    std::vector<char> stack;
};
struct Launch {
    ucontext_t scheduler;
    std::vector<Fiber> fibers;
    unsigned int current = 0;
    void (*body)(void*) = nullptr;
    void* context = nullptr;
    std::vector<unsigned long long> slots;  // a warp's exchange: 32 per warp
};
static thread_local Launch* launch = nullptr;  // the launch this thread runs
static std::mutex launching;  // shared memory is one per kernel: one launch at a time
static void yield(State state) {
    Fiber& fiber = launch->fibers[launch->current];
    fiber.state = state;
    swapcontext(&fiber.context, &launch->scheduler);
}
static void fiber_main() {
    launch->body(launch->context);
    yield(DONE);
}
extern "C" void cxg_syncthreads() { yield(AT_BLOCK); }
extern "C" void cxg_syncwarp() { yield(AT_WARP); }
// Every lane's `value` of this thread's warp into `lanes` (the warp's lanes, in order): all of them
// must call it, as a full-mask shuffle needs on a GPU. Returns the warp's width.
extern "C" unsigned int cxg_warp_exchange(unsigned long long value, unsigned long long* lanes) {
    const unsigned int first = threadIdx.x / 32 * 32;
    const unsigned int width = blockDim.x - first < 32 ? blockDim.x - first : 32;
    launch->slots[threadIdx.x] = value;
    yield(AT_WARP);  // every lane has written
    for (unsigned int i = 0; i < width; ++i) lanes[i] = launch->slots[first + i];
    yield(AT_WARP);  // every lane has read: the slots may be written again
    return width;
}
// A grid whose CUDA blocks synchronize their threads: block after block, each block's `bx` threads
// as fibers, passes over them until all are done.
extern "C" void cxg_run_grid(unsigned int gx, unsigned int bx, void (*body)(void*), void* context) {
    std::lock_guard<std::mutex> hold(launching);
    static Launch here;  // its fibers' stacks kept from launch to launch
    here.body = body, here.context = context;
    if (here.fibers.size() < bx) here.fibers.resize(bx);
    here.slots.assign(bx, 0);
    for (unsigned int t = 0; t < bx; ++t) here.fibers[t].stack.resize(128 << 10);
    launch = &here;
    gridDim = {gx, 1, 1};
    blockDim = {bx, 1, 1};
    for (unsigned int b = 0; b < gx; ++b) {
        blockIdx = {b, 0, 0};
        for (Fiber& fiber : here.fibers) {
            getcontext(&fiber.context);
            fiber.context.uc_stack.ss_sp = fiber.stack.data();
            fiber.context.uc_stack.ss_size = fiber.stack.size();
            fiber.context.uc_link = nullptr;
            makecontext(&fiber.context, fiber_main, 0);
            fiber.state = READY;
        }
        for (unsigned int done = 0; done < bx;) {
            bool ran = false;
            for (unsigned int t = 0; t < bx; ++t) {
                Fiber& fiber = here.fibers[t];
                if (fiber.state == AT_BLOCK || fiber.state == DONE) continue;
                here.current = t;
                threadIdx = {t, 0, 0};
                swapcontext(&here.scheduler, &fiber.context);
                ran = true;
                done += fiber.state == DONE;
            }
            if (!ran) {  // every thread still running waits at __syncthreads: they go on together
                for (Fiber& fiber : here.fibers) {
                    if (fiber.state == AT_BLOCK) fiber.state = READY;
                }
            }
        }
    }
    launch = nullptr;
}
"""
# What a kernel library sees of CUDA (light, so that each kernel builds fast).
_CUDA_SHIM = r"""
#include <cstdint>
#include <type_traits>
struct dim3 { unsigned int x, y, z; };
extern thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;
extern "C" void cxg_syncthreads();
extern "C" void cxg_run_grid(unsigned int gx, unsigned int bx, void (*body)(void*), void* context);
template <class F> static void cxg_call(void* f) { (*static_cast<F*>(f))(); }
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static  // one per kernel: the CUDA blocks of a launch run one after another
static inline void __syncthreads() { cxg_syncthreads(); }
// Warp-level operations, full-mask only: the warp's lanes (fibers) meet and exchange values.
extern "C" unsigned int cxg_warp_exchange(unsigned long long value, unsigned long long* lanes);
extern "C" void cxg_syncwarp();
static inline void __syncwarp(unsigned int = 0xFFFFFFFFu) { cxg_syncwarp(); }
template <class T> static inline T cxg_shuffle(unsigned int mask, T value, int mode, int arg) {
    static_assert(sizeof(T) <= 8, "a shuffled value is at most 64 bits");
    if (mask != 0xFFFFFFFFu) __builtin_trap();  // the kernels shuffle whole warps only
    unsigned long long bits = 0, lanes[32];
    __builtin_memcpy(&bits, &value, sizeof(T));
    const unsigned int width = cxg_warp_exchange(bits, lanes), lane = threadIdx.x % 32;
    const int from = mode == 0 ? int(lane) - arg : mode == 1 ? int(lane) + arg : mode == 2 ? int(lane ^ arg) : arg % 32;
    if (from < 0 || from >= int(width)) return value;  // past the warp's lanes: a lane keeps its own
    T out;
    __builtin_memcpy(&out, &lanes[from], sizeof(T));
    return out;
}
template <class T> static inline T __shfl_up_sync(unsigned int m, T v, unsigned int d) {
    return cxg_shuffle(m, v, 0, d);
}
template <class T> static inline T __shfl_down_sync(unsigned int m, T v, unsigned int d) {
    return cxg_shuffle(m, v, 1, d);
}
template <class T> static inline T __shfl_xor_sync(unsigned int m, T v, int x) { return cxg_shuffle(m, v, 2, x); }
template <class T> static inline T __shfl_sync(unsigned int m, T v, int from) { return cxg_shuffle(m, v, 3, from); }
static inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
    if (mask != 0xFFFFFFFFu) __builtin_trap();
    unsigned long long lanes[32];
    const unsigned int width = cxg_warp_exchange(predicate != 0, lanes);
    unsigned int bits = 0;
    for (unsigned int i = 0; i < width; ++i) bits |= unsigned(lanes[i] != 0) << i;
    return bits;
}
template <class T> static inline T __reduce_add_sync(unsigned int mask, T value) {
    static_assert(sizeof(T) == 4, "a reduced value is 32 bits");
    if (mask != 0xFFFFFFFFu) __builtin_trap();
    unsigned long long lanes[32];
    const unsigned int width = cxg_warp_exchange((unsigned int)value, lanes);
    unsigned int sum = 0;  // wraps as the device's 32-bit addition does
    for (unsigned int i = 0; i < width; ++i) sum += (unsigned int)lanes[i];
    return (T)sum;
}
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned int x) { return __builtin_ffs(int(x)); }
// atomics as real ones: a CUDA block's threads run at once
template <class T> static inline T cxg_update(T* at, T v, int op) {
    if constexpr (std::is_integral_v<T>) {
        if (op == 0) return __atomic_fetch_add(at, v, __ATOMIC_RELAXED);
    }
    T old;
    __atomic_load(at, &old, __ATOMIC_RELAXED);
    while (true) {
        T want = op == 0 ? old + v : op == 1 ? (v < old ? v : old) : (v > old ? v : old);
        if (__atomic_compare_exchange(at, &old, &want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return old;
    }
}
template <class T> static inline T atomicAdd(T* at, T v) { return cxg_update(at, v, 0); }
template <class T> static inline T atomicMin(T* at, T v) { return cxg_update(at, v, 1); }
template <class T> static inline T atomicMax(T* at, T v) { return cxg_update(at, v, 2); }
"""
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)', re.S)
_C_SCALARS = {
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "double": ctypes.c_double,
    "float": ctypes.c_float,
    "bool": ctypes.c_bool,
}
# the dtype a kernel argument of each C type must have: CuPy passes an argument's bytes as they are
# (a Python int as int64, a float as float64), so a mismatch is garbage on a GPU, not a conversion
_C_DTYPES = {
    "signed char": np.int8,
    "char": np.int8,
    "unsigned char": np.uint8,
    "short": np.int16,
    "unsigned short": np.uint16,
    "long long": np.int64,
    "unsigned long long": np.uint64,
    "int": np.int32,
    "unsigned int": np.uint32,
    "double": np.float64,
    "float": np.float32,
    "bool": np.bool_,
}


@dataclass(frozen=True)
class _KernelParam:
    name: str
    ctype: str  # the C type without const, restrict or the pointer
    pointer: bool
    const: bool


def _kernel_params(text: str) -> list[_KernelParam]:
    params = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        words = part.replace("*", " * ").split()
        name = words[-1]
        kind = [w for w in words[:-1] if w not in ("const", "__restrict__", "*")]
        params.append(_KernelParam(name, " ".join(kind), "*" in words, "const" in words))
    return params


def compile_cuda(code: str, sanitize: bool = False) -> tuple[ctypes.CDLL, dict[str, list[_KernelParam]]]:
    """A CUDA C source's kernels as C++ on the CPU: each `extern "C" __global__` function gets a
    launcher running the grid's blocks, each block's threads as the runtime's fibers if the
    source synchronizes them, else in loops."""
    kernels = {name: _kernel_params(params) for name, params in _KERNEL.findall(code)}
    launchers = []
    for name, params in kernels.items():
        declared = ", ".join(
            f"{'const ' if p.const else ''}{p.ctype}{'*' if p.pointer else ''} {p.name}" for p in params
        )
        call = f"{name}({', '.join(p.name for p in params)});"
        if "__syncthreads" in code or "_sync(" in code:  # a CUDA block's threads as the runtime's fibers
            run = f"  auto body = [&] {{ {call} }};\n  cxg_run_grid(gx, bx, &cxg_call<decltype(body)>, &body);\n"
        else:  # one after another, here: cheaper, and the same for a kernel whose threads never wait
            run = (
                "  gridDim = {gx, 1, 1}; blockDim = {bx, 1, 1};\n"
                "  for (unsigned int b = 0; b < gx; ++b) for (unsigned int t = 0; t < bx; ++t) {\n"
                f"    blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}}; {call}\n  }}\n"
            )
        signature = f"cxg_launch_{name}(unsigned int gx, unsigned int bx, {declared})"
        launchers.append(f'extern "C" void {signature} {{\n{run}}}\n')
    flags = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"] if sanitize else ["-O1"]
    _build(_CUDA_RUNTIME, "runtime", [*flags, "-std=c++17"], globally=True)  # its symbols first
    return _build(_CUDA_SHIM + code + "\n" + "".join(launchers), "cuda", [*flags, "-std=c++17"]), kernels


def _build(source: str, name: str, flags: list[str], globally: bool = False) -> ctypes.CDLL:
    """A C++ source built once into a shared library (cached by its text and flags) and loaded
    (`globally`: its symbols resolve those of the libraries loaded after it)."""
    digest = hashlib.sha256((source + " ".join(flags)).encode()).hexdigest()[:16]
    if digest not in _BUILT:
        _BUILD_DIR.mkdir(exist_ok=True)
        library = _BUILD_DIR / f"{name}-{digest}.so"
        if not library.exists():
            with tempfile.TemporaryDirectory(dir=_BUILD_DIR) as tmp:  # built aside, then renamed: atomic
                cpp, built = Path(tmp) / "source.cpp", Path(tmp) / "library.so"
                cpp.write_text(source)
                done = subprocess.run(
                    ["g++", *flags, "-shared", "-fPIC", "-o", str(built), str(cpp)], capture_output=True, text=True
                )
                if done.returncode != 0:
                    raise RuntimeError(f"{name} does not compile as C++ on the CPU:\n{done.stderr}")
                built.replace(library)
        _BUILT[digest] = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL if globally else ctypes.DEFAULT_MODE)
    return _BUILT[digest]


class RawModule:
    def __init__(self, code: str | None = None, **kwargs: Any):
        _check_keywords("cupy.RawModule", kwargs)
        if code is None:
            raise NotImplementedError("the stand-in compiles CUDA sources given as code=")
        self.code = code
        self._compiled: tuple[ctypes.CDLL, dict] | None = None

    def get_function(self, name: str) -> RawKernel:
        if self._compiled is None:
            self._compiled = compile_cuda(self.code, _STANDIN.sanitize)
        library, kernels = self._compiled
        if name not in kernels:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: no kernel {name!r} in the module")
        return RawKernel(self.code, name, _library=library, _params=kernels[name])


class RawKernel:
    def __init__(self, code: str, name: str, options: tuple = (), *, _library=None, _params=None, **kwargs: Any):
        _check_keywords("cupy.RawKernel", kwargs)
        if _library is None:
            _library, kernels = compile_cuda(code, _STANDIN.sanitize)
            _params = kernels[name]
        self.name, self._library, self._params = name, _library, _params

    def __call__(self, grid: tuple, block: tuple, args: tuple, *, shared_mem: int = 0) -> None:
        _STANDIN.launch_raw(self, grid, block, args)


# ---- the stand-in -----------------------------------------------------------------------------------------


@dataclass
class Counts:
    launches: Counter = field(default_factory=Counter)  # device -> kernel launches
    syncs: int = 0  # the host waiting for device work not yet known done: values read back, streams synchronized
    to_device: int = 0  # bytes copied host -> device
    to_host: int = 0  # bytes copied device -> host
    to_host_pinned: int = 0  # of them, into pinned host memory
    sync_sites: Counter = field(default_factory=Counter)  # where in gpu_kernels the host waited (file:line)
    pinned: int = 0  # pinned host buffers allocated (not found free in the pinned pool)
    pinned_released: int = 0  # pinned host buffers the pool gave back to the host

    @property
    def total_launches(self) -> int:
        return sum(self.launches.values())


class StandIn:
    def __init__(self, devices: int = 1, memory: int = 1 << 30, sanitize: bool = False):
        self.devices, self.memory, self.sanitize = devices, memory, sanitize
        self.slow_device = False  # events not done until waited for (`_Event.done`)
        self.atomic_order = np.random.default_rng(0)  # the order of a float sum's atomic adds (seeded)
        self.counts = Counts()
        self.host_seen: dict[int, int] = {}
        self.pending_copies: dict[int, list[tuple[_Stream, int]]] = {}  # pinned buffer -> in-flight copies from it
        self.errors: list[str] = []
        self._local = threading.local()
        self._lock = threading.RLock()
        self._null = {d: _Stream(self, d, blocking=True, null=True) for d in range(devices)}
        self._streams: list[weakref.ref] = []
        self._device_used = Counter()  # device -> bytes of arrays allocated without a pool
        self._pinned_free = Counter()  # size -> pinned host buffers of that size freed to the pool
        self._pinned_spans: dict[int, tuple[int, int]] = {}  # pinned buffer -> its addresses [start, end)
        self.module = self._cupy_module()
        self.cupyx = self._cupyx_module()

    # -- thread-local current device, stream, allocator ---------------------------------------------------
    def state(self) -> _ThreadState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _ThreadState()
        return state

    def current_stream(self) -> _Stream:
        state = self.state()
        return state.streams.get(state.device) or self._null[state.device]

    def new_stream(self, null: bool = False, non_blocking: bool = False, ptds: bool = False, priority: Any = None):
        stream = self._null[self.state().device] if null else _Stream(self, self.state().device, not non_blocking)
        self._streams.append(weakref.ref(stream))
        return stream

    def all_streams(self, device: int) -> list[_Stream]:
        alive = [s for ref in self._streams if (s := ref()) is not None and s.device == device]
        return [self._null[device], *alive]

    def blocking_streams(self, device: int) -> list[_Stream]:
        return [s for s in self.all_streams(device) if s.blocking]

    # -- synchronization -------------------------------------------------------------------------------------
    def host_waits(self, stream: _Stream) -> None:
        self.host_waits_for({**stream.seen, stream.key: stream.seq})

    def host_knows(self, seen: dict[int, int]) -> None:
        """The host learned, without waiting, that the operations `seen` are done (an event queried)."""
        with self._lock:
            for stream_id, seq in seen.items():
                self.host_seen[stream_id] = max(self.host_seen.get(stream_id, 0), seq)

    def host_waits_for(self, seen: dict[int, int]) -> None:
        frame = sys._getframe(1)
        while frame is not None and "gpu_kernels" not in frame.f_code.co_filename:
            frame = frame.f_back
        site = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}" if frame is not None else "?"
        with self._lock:
            if all(self.host_seen.get(stream_id, 0) >= seq for stream_id, seq in seen.items()):
                return  # everything it would wait for is known done: the call returns at once
            self.counts.syncs += 1
            self.counts.sync_sites[site] += 1
            for stream_id, seq in seen.items():
                self.host_seen[stream_id] = max(self.host_seen.get(stream_id, 0), seq)

    # -- reading and writing device data ------------------------------------------------------------------------
    def read(self, array: ndarray) -> np.ndarray:
        """The data of `array` for an operation about to run on the current stream: on this device,
        and ordered after the operation that wrote it."""
        device = self._on_this_device(array)
        stream = self.current_stream()
        writer, seq = array._written
        if not stream.ordered_after(writer, seq):
            message = (
                f"stream order: an operation on {_name_of(stream)} of device {device} reads an array that "
                f"{_name_of(writer)} wrote, with no wait on an event recorded after that write"
            )
            self.errors.append(message)
            raise StreamOrderError(message)
        return array._data

    def _on_this_device(self, array: ndarray) -> int:
        device = self.state().device
        if array._device != device:
            raise ValueError(
                f"The device where the array resides ({array._device}) is different from the current device "
                f"({device}). Peer access is unavailable between these devices."
            )
        return device

    def _unwrap(self, value: Any, transfer: bool = False) -> Any:
        if isinstance(value, ndarray):
            return self.read(value)
        if isinstance(value, np.ndarray) and not isinstance(value, np.generic):
            if transfer:
                return value
            raise _refused(value)
        if isinstance(value, list | tuple):
            return type(value)(self._unwrap(v, transfer) for v in value)
        if isinstance(value, slice):
            return slice(*(self._unwrap(v) for v in (value.start, value.stop, value.step)))
        return value

    def wrap(self, value: Any, written: tuple[_Stream, int]) -> Any:
        if isinstance(value, np.ndarray):
            return self.allocate(value, written)
        if isinstance(value, np.generic | bool | int | float) and not isinstance(value, np.dtype):
            return self.allocate(np.asarray(value), written)
        if isinstance(value, tuple | list):
            return type(value)(self.wrap(v, written) for v in value)
        return value

    def allocate(self, data: np.ndarray, written: tuple[_Stream, int]) -> ndarray:
        """A device array of `data`; charged to the current pool (or the device) unless it is a view."""
        device = self.state().device
        pool = self.state().pool if data.flags.owndata else None
        with self._lock:
            if pool is not None and pool.limit and pool.used + data.nbytes > pool.limit:
                raise OutOfMemoryError(data.nbytes, pool.used, pool.limit)
            charged = data.flags.owndata and pool is None
            if charged:
                if self._device_used[device] + data.nbytes > self.memory:
                    raise OutOfMemoryError(data.nbytes, self._device_used[device], self.memory)
                self._device_used[device] += data.nbytes
        array = ndarray(data, device, written, pool)
        if charged:
            weakref.finalize(array, self._free_device, device, data.nbytes)
        return array

    def _free_device(self, device: int, nbytes: int) -> None:
        with self._lock:
            self._device_used[device] -= nbytes

    def run(self, compute: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """One kernel launch on the current stream: `compute` on the inputs' data, its result a new
        device array (scalars too: CuPy answers reductions with 0-d arrays)."""
        inputs = self._unwrap(args)
        options = {k: self._unwrap(v) for k, v in kwargs.items()}
        written = self.current_stream().step()
        with self._lock:
            self.counts.launches[self.state().device] += 1
        return self.wrap(compute(*inputs, **options), written)

    def uploaded(self, value: Any) -> Any:
        """Host arrays given as an index or a value to store: copied to the device first, as CuPy does."""
        if isinstance(value, np.ndarray) and not isinstance(value, ndarray):
            with self._lock:
                self.counts.to_device += value.nbytes
            return self.wrap(np.array(value), self.current_stream().step())
        if isinstance(value, tuple):
            return tuple(self.uploaded(v) for v in value)
        return value

    def write(self, array: ndarray, compute: Any, *args: Any) -> None:
        """An operation writing `array` in place (a setitem, an in-place operator, a scatter)."""
        self.read(array)
        inputs = self._unwrap(args)
        array._written = self.current_stream().step()
        with self._lock:
            self.counts.launches[self.state().device] += 1
        compute(*inputs)

    def to_host(
        self, array: ndarray, stream: _Stream | None, blocking: bool, out: np.ndarray | None = None
    ) -> np.ndarray:
        stream = stream or self.current_stream()
        with self._streamed(stream):
            data = self.read(array).copy() if out is None else out
            if out is not None:
                np.copyto(out, self.read(array))
            stream.step()
        with self._lock:
            self.counts.to_host += data.nbytes
            if self._pinned_buffer(data) is not None:
                self.counts.to_host_pinned += data.nbytes
        if blocking:
            self.host_waits(stream)
        return data

    def from_host(self, array: ndarray, host: np.ndarray, stream: _Stream | None) -> None:
        if isinstance(host, ndarray):
            raise TypeError("ndarray.set takes a host (NumPy) array")
        stream = stream or self.current_stream()
        with self._streamed(stream):
            self._on_this_device(array)
            np.copyto(array._data, host)
            array._written = stream.step()
        with self._lock:
            self.counts.to_device += host.nbytes
            buffer = self._pinned_buffer(host)
            if buffer is not None and not stream.null:  # asynchronous: the buffer must live on
                pending = self.pending_copies.setdefault(buffer, [])
                pending[:] = [p for p in pending if self.host_seen.get(p[0].key, 0) < p[1]]  # those still in flight
                pending.append((stream, array._written[1]))

    @contextlib.contextmanager
    def _streamed(self, stream: _Stream) -> Iterator[None]:
        state = self.state()
        previous = state.streams.get(stream.device)
        device, state.device = state.device, stream.device
        state.streams[stream.device] = stream
        try:
            yield
        finally:
            state.streams[stream.device] = previous
            state.device = device

    def _pinned_buffer(self, host: Any) -> int | None:
        """The pinned buffer (its key) holding a host array's memory, as CUDA tells pinned memory by
        its address: an array made over a pinned buffer's bytes is pinned whatever its Python type."""
        if not isinstance(host, np.ndarray) or host.nbytes == 0:
            return None
        at = host.ctypes.data
        with self._lock:
            return next((key for key, (start, end) in self._pinned_spans.items() if start <= at < end), None)

    def pinned_released(self, key: int, size: int) -> None:
        """A pinned host buffer was freed, back to the pool: a copy from it still in flight read freed
        memory."""
        with self._lock:
            self._pinned_free[size] += 1
            del self._pinned_spans[key]
            for stream, seq in self.pending_copies.pop(key, []):
                if self.host_seen.get(stream.key, 0) < seq:
                    self.errors.append(
                        f"a pinned host buffer was released while its copy on {_name_of(stream)} was in flight"
                    )

    def launch_raw(self, kernel: RawKernel, grid: tuple, block: tuple, args: tuple) -> None:
        """A raw CUDA kernel's launch: its pointers read (ordered after their writes) and the
        non-const ones written, its grid run on the CPU."""
        if len(args) != len(kernel._params) or len(grid) != 1 or len(block) != 1:
            raise TypeError(f"kernel {kernel.name}: {len(kernel._params)} arguments and 1-D grids and blocks")
        written, values, keep = self.current_stream().step(), [], []
        for value, param in zip(args, kernel._params, strict=True):
            if param.pointer:
                if not isinstance(value, ndarray):
                    raise (
                        _refused(value)
                        if isinstance(value, np.ndarray)
                        else TypeError(f"kernel {kernel.name}: {param.name} wants a device array, not {type(value)}")
                    )
                data = self.read(value)
                if not data.flags.c_contiguous:
                    raise ValueError(f"kernel {kernel.name}: {param.name} is not contiguous")
                if data.dtype != np.dtype(_C_DTYPES[param.ctype]):
                    raise TypeError(f"kernel {kernel.name}: {param.name} points to {param.ctype}, given {data.dtype}")
                if not param.const:
                    value._written = written
                keep.append(data)
                values.append(ctypes.c_void_p(data.ctypes.data))
            else:
                if isinstance(value, ndarray | np.ndarray):
                    raise TypeError(f"kernel {kernel.name}: {param.name} is a scalar")
                given = np.asarray(value).dtype if isinstance(value, np.generic | bool | int | float) else None
                if given != np.dtype(_C_DTYPES[param.ctype]):
                    raise TypeError(f"kernel {kernel.name}: {param.name} is {param.ctype}, given {given}")
                values.append(_C_SCALARS[param.ctype](value))
        with self._lock:
            self.counts.launches[self.state().device] += 1
        getattr(kernel._library, f"cxg_launch_{kernel.name}")(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), *values)

    # -- the modules ---------------------------------------------------------------------------------------------
    def _function(self, space: str, name: str, real: Any) -> Any:
        """The stand-in of a real CuPy function: NumPy's, on device data."""
        numpy_name = {"asnumpy": None, "asarray": "asarray", "array": "array"}.get(name, name)
        if name == "asnumpy":
            return lambda a, stream=None, order="C", out=None, blocking=True: (
                self.to_host(a, stream, blocking) if isinstance(a, ndarray) else np.asarray(a)
            )
        if name in ("asarray", "array"):

            def transfer(a: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
                _check_keywords(f"{space}.{name}", kwargs)
                if isinstance(a, ndarray):
                    return self.run(lambda x: np.array(x, dtype=dtype, copy=name == "array"), name, a)
                host = np.array(self._unwrap(a, transfer=True), dtype=dtype)
                with self._lock:
                    self.counts.to_device += host.nbytes
                return self.wrap(host, self.current_stream().step())

            return transfer
        target = getattr(np, numpy_name, None)
        if target is None:
            return _missing(f"{space}.{name}")
        if name in ("empty", "empty_like"):  # an allocation, no kernel: nothing written yet

            def allocate(*args: Any, **kwargs: Any) -> ndarray:
                _check_keywords(f"{space}.{name}", kwargs)
                data = target(*self._unwrap(args), **kwargs)
                data.view(np.uint8).reshape(-1)[:] = POISON  # what device memory held: never zeros to rely on
                return self.allocate(data, (self.current_stream(), 0))

            return allocate
        if isinstance(real, _REAL_UFUNC_TYPES):
            return _Ufunc(self, name, target)
        if name == "bincount":
            target = self._bincount

        def call(*args: Any, **kwargs: Any) -> Any:
            _check_keywords(f"{space}.{name}", kwargs)
            return self.run(lambda *a, **k: target(*a, **k), name, *args, **kwargs)

        call.__name__ = name
        return call

    def _cupy_module(self) -> types.ModuleType:
        module = _StrictModule("cupy", "cupy", self)
        module.ndarray = ndarray
        module.RawModule = RawModule
        module.RawKernel = RawKernel
        module.__version__ = surface()["version"]
        cuda = _StrictModule("cupy.cuda", "cuda", self)
        cuda.Stream = lambda *a, **k: (_check_keywords("cuda.Stream", k), self.new_stream(*a, **k))[1]
        cuda.Event = _Event
        cuda.Device = _Device
        cuda.MemoryPool = _Pool
        cuda.get_current_stream = lambda device_id=None: self.current_stream()
        cuda.get_elapsed_time = _elapsed_time
        cuda.using_allocator = self._using_allocator
        cuda.memory = types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError)
        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: self.devices,
            getDevice=lambda: self.state().device,
            memGetInfo=lambda: (self.memory - self._device_used[self.state().device], self.memory),
            deviceSynchronize=lambda: _Device().synchronize(),
            CUDARuntimeError=CUDARuntimeError,
        )
        for name in vars(runtime):
            if name not in surface()["runtime"]:
                raise AssertionError(f"the stand-in offers cupy.cuda.runtime.{name}, which the real one lacks")
        cuda.runtime = runtime
        module.cuda = cuda
        module.get_default_pinned_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=self._free_pinned)
        return module

    def _bincount(self, x: np.ndarray, weights: np.ndarray | None = None, minlength: int = 0) -> np.ndarray:
        """NumPy's bincount, float weights added in an order of their own at each call, as a GPU's
        atomic adds do: a float sum is not the same to the last bit as NumPy's."""
        if weights is not None and weights.dtype.kind == "f":
            x, weights = self._shuffled(x, weights)
        return np.bincount(x, weights=weights, minlength=minlength)

    def _shuffled(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values in an order of their own (seeded): the order a GPU's atomic adds land in."""
        order = self.atomic_order.permutation(len(keys))
        return keys[order], values[order]

    def _in_atomic_order(self, array: ndarray, slices: Any, value: Any) -> tuple[Any, Any]:
        """A float scatter's indices and values in an order of their own, as atomic adds land."""
        if array.dtype.kind == "f" and isinstance(slices, np.ndarray) and np.ndim(value) == 1 and slices.ndim == 1:
            return self._shuffled(slices, value)
        return slices, value

    def _cupyx_module(self) -> types.ModuleType:
        module = _StrictModule("cupyx", "cupyx", self)

        def scatter(name: str, ufunc: np.ufunc):
            def scatter_op(a: ndarray, slices: Any, value: Any) -> None:
                if a.dtype not in _SCATTER_DTYPES[name]:
                    raise TypeError(f"cupyx.{name} does not support dtype {a.dtype}")
                if name != "scatter_add" and a.dtype.kind == "f":
                    raise InexactOnDevice(f"cupyx.{name} on {a.dtype} rounds through float32 on a GPU")
                self.write(a, lambda s, v: ufunc.at(a._data, *self._in_atomic_order(a, s, v)), slices, value)

            return scatter_op

        module.scatter_add = scatter("scatter_add", np.add)
        module.scatter_max = scatter("scatter_max", np.maximum)
        module.scatter_min = scatter("scatter_min", np.minimum)
        module.empty_pinned = lambda shape, dtype=float, order="C": self._pinned(np.empty(shape, dtype, order))
        module.zeros_pinned = lambda shape, dtype=float, order="C": self._pinned(np.zeros(shape, dtype, order))
        return module

    def _pinned(self, array: np.ndarray) -> np.ndarray:
        """A pinned host buffer from the pool as CuPy's pinned pool keeps it: a size rounded up to a
        multiple of 512 bytes, then to a power of two; a buffer of that size freed before is reused,
        else a new one is allocated."""
        size = 1 << (-(-max(array.nbytes, 1) // 512) * 512 - 1).bit_length()
        with self._lock:
            if self._pinned_free[size]:
                self._pinned_free[size] -= 1
            else:
                self.counts.pinned += 1
            self._pinned_spans[id(array)] = (array.ctypes.data, array.ctypes.data + max(array.nbytes, 1))
        weakref.finalize(array, self.pinned_released, id(array), size)
        return array

    def _free_pinned(self) -> None:
        """`free_all_blocks` of the pinned pool: the buffers freed to it go back to the host."""
        with self._lock:
            self.counts.pinned_released += sum(self._pinned_free.values())
            self._pinned_free.clear()

    @contextlib.contextmanager
    def _using_allocator(self, allocator: Any = None) -> Iterator[None]:
        state = self.state()
        previous = state.pool
        state.pool = getattr(allocator, "__self__", None)
        try:
            yield
        finally:
            state.pool = previous

    def check(self) -> None:
        """Raise what the run broke that raised nowhere (a buffer freed under a copy)."""
        gc.collect()
        if self.errors:
            raise StreamOrderError("; ".join(dict.fromkeys(self.errors)))


_SCATTER_DTYPES = {  # what the real cupyx.scatter_* take (CuPy's _scatter_op: no int64, no narrow integers)
    "scatter_add": {np.dtype(t) for t in ("int32", "uint32", "uint64", "float16", "float32", "float64")},
    "scatter_max": {np.dtype(t) for t in ("int32", "uint32", "uint64", "float32", "float64")},
    "scatter_min": {np.dtype(t) for t in ("int32", "uint32", "uint64", "float32", "float64")},
}
_REAL_UFUNC_TYPES: tuple[type, ...] = ()


class _Ufunc:
    """A CuPy ufunc: called, or through the methods the real one has."""

    def __init__(self, standin: StandIn, name: str, target: np.ufunc):
        self.standin, self.name, self.target = standin, name, target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.standin.run(lambda *a, **k: self.target(*a, **k), self.name, *args, **kwargs)

    def __getattr__(self, method: str) -> Any:
        if method not in surface()["ufunc"]:
            raise AttributeError(f"cupy.ufunc has no attribute {method!r}")
        if method == "at":
            return lambda a, indices, b=None: self.standin.write(
                a, lambda i, v: self.target.at(a._data, i, v), indices, b
            )
        return lambda *a, **k: self.standin.run(lambda *x, **y: getattr(self.target, method)(*x, **y), method, *a, **k)


def _missing(name: str):
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"the stand-in has no {name}")

    return missing


def _name_of(stream: _Stream) -> str:
    return "the null stream" if stream.null else f"stream {stream.key}"


class _StrictModule(types.ModuleType):
    """A module offering exactly the names the real one has."""

    def __init__(self, name: str, space: str, standin: StandIn):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        object.__setattr__(self, "_space", space)
        object.__setattr__(self, "_standin", standin)
        object.__setattr__(self, "_made", {})

    def __getattr__(self, name: str) -> Any:
        real = surface().get(self._space, {})
        if name.startswith("_") or name not in real:
            raise AttributeError(f"module '{self.__name__}' has no attribute {name!r} (nor has the real one)")
        made = self._made
        if name not in made:
            value = real[name]
            if isinstance(value, types.ModuleType):
                made[name] = _Unmodelled(f"{self.__name__}.{name}")
            elif getattr(np, name, None) is value or not callable(value):
                made[name] = value  # dtypes, constants and what CuPy takes from NumPy as it is
            else:
                made[name] = self._standin._function(self._space, name, value)
        return made[name]


class _Unmodelled:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise NotImplementedError(f"the stand-in does not model {self._name}")


_STANDIN: StandIn = None  # type: ignore[assignment]


@contextlib.contextmanager
def installed(devices: int = 1, memory: int = 1 << 30, sanitize: bool = False) -> Iterator[StandIn]:
    """`import cupy` and `import cupyx` give the stand-in inside the block, and a CuPy backend made
    there is built on it; afterwards everything is as it was. Raises what the run broke silently."""
    global _STANDIN, _REAL_UFUNC_TYPES
    real = surface()
    _REAL_UFUNC_TYPES = tuple({type(v) for v in real["cupy"].values() if type(v).__name__ == "ufunc"})
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ("cupy", "cupyx")}
    cached = backend_choice._BACKENDS.pop("cupy", None)
    _STANDIN = standin = StandIn(devices, memory, sanitize)
    sys.modules["cupy"], sys.modules["cupyx"] = standin.module, standin.cupyx
    sys.modules["cupy.cuda"] = standin.module.cuda
    try:
        yield standin
        standin.check()
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in ("cupy", "cupyx")]:
            del sys.modules[name]
        sys.modules.update(saved)
        backend_choice._BACKENDS.pop("cupy", None)
        if cached is not None:
            backend_choice._BACKENDS["cupy"] = cached
