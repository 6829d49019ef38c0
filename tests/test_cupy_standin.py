"""The stand-in of CuPy is as strict as CuPy where it matters here, and catches the mistakes it is
there to catch: names and keywords the real wheel lacks, host and device mixed, an array used on
another device, a read no wait orders after its write, a pinned buffer freed under its copy, dtypes
cupyx's scatters refuse, a kernel reading out of bounds; it counts launches, synchronizations and
bytes moved, and holds pools and devices to their memory."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.cupy_standin import OutOfMemoryError, StreamOrderError, installed

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def test_only_the_real_wheels_names_and_keywords() -> None:
    with installed() as standin:
        import cupy
        import cupyx

        a = cupy.arange(10)
        assert int(cupy.sum(a)) == 45 and cupy.int64 is np.int64
        with pytest.raises(AttributeError, match="nor has the real one"):
            cupy.reduceat  # noqa: B018 (NumPy has add.reduceat; CuPy has no module-level one)
        with pytest.raises(TypeError, match="unexpected keyword argument 'where'"):
            cupy.sum(a, where=a > 3)  # NumPy takes where=, CuPy does not
        with pytest.raises(AttributeError):
            a.tobytes_in_some_other_way  # noqa: B018
        with pytest.raises(AttributeError):
            cupyx.no_such_thing  # noqa: B018
        assert standin.counts.total_launches >= 2


def test_host_and_device_do_not_mix() -> None:
    with installed():
        import cupy

        device, host = cupy.arange(4), np.arange(4)
        for conversion in (np.asarray, pa.array, lambda d: np.searchsorted(host, d)):
            with pytest.raises((TypeError, pa.ArrowInvalid)):
                conversion(device)
        with pytest.raises(TypeError, match="Unsupported type"):
            device + host
        with pytest.raises(TypeError, match="Unsupported type"):
            cupy.concatenate((device, host))
        assert (device.get() == host).all() and cupy.asnumpy(device * 2).tolist() == [0, 2, 4, 6]
        assert int(np.searchsorted(device, device[2])) == 2  # NumPy's functions dispatch to CuPy's


def test_an_array_is_used_only_on_its_own_device() -> None:
    with installed(devices=2):
        import cupy

        with cupy.cuda.Device(0):
            table = cupy.arange(5)
        with cupy.cuda.Device(1), pytest.raises(ValueError, match="Peer access is unavailable"):
            table + 1


def test_a_read_on_another_stream_needs_a_wait_after_the_write() -> None:
    with pytest.raises(StreamOrderError), installed():
        import cupy

        compute, copy = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with compute:
            result = cupy.arange(100) * 3
        with pytest.raises(StreamOrderError, match="no wait on an event"):
            result.get(stream=copy)  # copied out before the compute stream is known to have made it
    with installed():
        import cupy

        compute, copy = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with compute:
            result = cupy.arange(100) * 3
        copy.wait_event(compute.record())
        assert result.get(stream=copy)[-1] == 297
        with compute:
            later = result + 1
        compute.synchronize()  # the host waited: any stream may read it now
        assert int(later.get(stream=copy)[0]) == 1


def test_a_pinned_buffer_must_outlive_its_copy() -> None:
    with pytest.raises(StreamOrderError, match="pinned host buffer was released"), installed():
        import cupy
        import cupyx

        stream = cupy.cuda.Stream(non_blocking=True)
        device = cupy.empty(1000, cupy.int64)
        pinned = cupyx.empty_pinned(1000, np.int64)
        pinned[...] = 7
        device.set(pinned, stream=stream)
        del pinned  # freed while the copy may still be reading it
        gc.collect()
    with installed():
        import cupy
        import cupyx

        stream = cupy.cuda.Stream(non_blocking=True)
        device = cupy.empty(1000, cupy.int64)
        pinned = cupyx.empty_pinned(1000, np.int64)
        device.set(pinned, stream=stream)
        stream.synchronize()
        del pinned


def test_a_view_of_a_pinned_buffer_is_held_to_its_buffer() -> None:
    """A copy from a view of a pinned buffer needs the buffer alive, not the view: the view may go."""
    with pytest.raises(StreamOrderError, match="pinned host buffer was released"), installed() as standin:
        import cupy
        import cupyx

        stream = cupy.cuda.Stream(non_blocking=True)
        device = cupy.empty(100, cupy.int64)
        buffer = cupyx.empty_pinned(4096, np.uint8)
        view = buffer[:800].view(np.int64)
        device.set(view, stream=stream)
        del view
        gc.collect()
        assert not standin.errors  # the buffer holds on
        del buffer
        gc.collect()
    with installed() as standin:
        import cupy
        import cupyx

        stream = cupy.cuda.Stream(non_blocking=True)
        device = cupy.empty(100, cupy.int64)
        buffer = cupyx.empty_pinned(4096, np.uint8)
        for _ in range(3):
            device.set(buffer[:800].view(np.int64), stream=stream)
            stream.synchronize()
        assert len(standin.pending_copies[id(buffer)]) == 1  # the copies done are forgotten


def test_get_into_a_host_array_checks_it_as_cupy_does() -> None:
    with installed() as standin:
        import cupy
        import cupyx

        device = cupy.arange(6, dtype=cupy.int64).reshape(2, 3)
        pinned = cupyx.empty_pinned((2, 3), np.int64)
        assert device.get(out=pinned) is pinned and pinned.tolist() == [[0, 1, 2], [3, 4, 5]]
        assert standin.counts.to_host_pinned == standin.counts.to_host == 48
        assert device.get(out=np.empty((2, 3), np.int64)).sum() == 15 and standin.counts.to_host_pinned == 48
        with pytest.raises(TypeError, match="cannot be obtained"):
            device.get(out=np.empty((2, 3), np.int32))
        with pytest.raises(ValueError, match="Shape mismatch"):
            device.get(out=np.empty(6, np.int64))
        with pytest.raises(TypeError, match=r"Only numpy\.ndarray"):
            device.get(out=cupy.empty((2, 3), cupy.int64))


def test_scatters_take_only_the_dtypes_cupyx_builds_them_for() -> None:
    with installed():
        import cupy
        import cupyx

        for dtype in (cupy.int64, cupy.uint8, cupy.int16):
            with pytest.raises(TypeError, match="does not support dtype"):
                cupyx.scatter_max(cupy.zeros(3, dtype), cupy.arange(3), cupy.ones(3, dtype))
        out = cupy.zeros(3, cupy.int32)
        cupyx.scatter_max(out, cupy.asarray([0, 0, 2]), cupy.asarray([5, 9, 1], dtype=cupy.int32))
        assert out.get().tolist() == [9, 0, 1]


DOUBLE = """
extern "C" __global__ void twice(const long long* __restrict__ in, long long n, long long* __restrict__ out) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (long long)blockDim.x)
        out[i] = 2 * in[i];
}
"""


def test_raw_kernels_run_their_cuda_source_and_read_after_the_writes() -> None:
    with installed() as standin:
        import cupy

        twice = cupy.RawModule(code=DOUBLE).get_function("twice")
        values, out = cupy.arange(1000, dtype=cupy.int64), cupy.empty(1000, dtype=cupy.int64)
        twice((3,), (64,), (values, np.int64(1000), out))  # a grid smaller than the rows: the loop strides
        assert out.get().tolist() == list(range(0, 2000, 2)) and standin.counts.launches[0] >= 2
        with pytest.raises(TypeError, match="Unsupported type"):
            twice((1,), (1,), (np.arange(3), np.int64(3), out))
        with pytest.raises(TypeError, match="n is long long, given int32"):  # its bytes would be garbage
            twice((1,), (1,), (values, np.int32(3), out))
        with pytest.raises(TypeError, match="in points to long long, given int32"):
            twice((1,), (1,), (values.astype(cupy.int32), np.int64(3), out))
        twice((3,), (64,), (values, np.int64(1000), out))  # written again, on the null stream
        other = cupy.cuda.Stream(non_blocking=True)
        with other, pytest.raises(StreamOrderError):
            twice((1,), (32,), (out, np.int64(1000), values))  # read on another stream, no wait
        standin.errors.clear()


def test_counts_and_memory_limits() -> None:
    with installed(memory=1 << 20) as standin:
        import cupy

        before = standin.counts.syncs
        a = cupy.asarray(np.arange(1000, dtype=np.int64))
        assert standin.counts.to_device == 8000
        total = int(a.sum())
        assert total == 499500 and standin.counts.syncs == before + 1 and standin.counts.to_host == 8
        cupy.cuda.get_current_stream().synchronize()  # nothing new to wait for: returns at once, not counted
        assert standin.counts.syncs == before + 1
        with pytest.raises(OutOfMemoryError):
            cupy.zeros(1 << 18, cupy.int64)  # 2 MiB on a 1 MiB device
        pool = cupy.cuda.MemoryPool()
        pool.set_limit(size=4096)
        with cupy.cuda.using_allocator(pool.malloc):
            cupy.zeros(256, cupy.int64)
            with pytest.raises(OutOfMemoryError):
                cupy.zeros(1024, cupy.int64)
        assert cupy.cuda.runtime.getDeviceCount() == 1
