"""The CUDA C kernels (`gpu_kernels/cuda/*.cu`): their sources, the launch shape they take, and the
register budget each must compile within on the GPUs the project targets.

The CuPy backend loads them with `cupy.RawModule`; the tests compile every one with NVRTC for
`ARCHES` (registers and spills from ptxas) and, as C++ on the CPU through a shim that runs the
grid's blocks and threads in loops, compare what they compute with the NumPy backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

ARCHES = ("sm_80", "sm_90")  # A100, H100/H200
THREADS = 256  # per block
MAX_BLOCKS = 4096  # a grid-stride loop covers the rest: per-launch cost stays flat for large blocks


@dataclass(frozen=True)
class Kernel:
    name: str  # the __global__ function
    files: tuple[str, ...]  # its source, under gpu_kernels/cuda/
    registers: int  # per thread, at most, on every architecture of ARCHES (no spills either)

    def source(self) -> str:
        return cuda_source(*self.files)


@cache
def cuda_source(*files: str) -> str:
    """The CUDA C of `files` under gpu_kernels/cuda/, after the device functions every kernel
    shares (bits.cuh): NVRTC compiles one source, with no include path. Read once: a kernel's
    launch looks its module up by this text."""
    return "".join(resources.files("gpu_kernels").joinpath("cuda", f).read_text() for f in ("bits.cuh", *files))


KERNELS = {
    k.name: k
    for k in [
        Kernel("cxg_unpack", ("unpack.cu",), 32),
        Kernel("cxg_bucket_counts", ("tile_scan.cuh", "partition.cu"), 32),
        Kernel("cxg_bucket_scatter", ("tile_scan.cuh", "partition.cu"), 48),
    ]
}
# of the partitioning kernels, four per thread of their tile scan (partition.cu takes 256 threads):
# more go through the general kernels
MAX_BUCKETS = 4 * THREADS
PARTITION_ROWS = 16 * THREADS  # rows a CUDA block of the partitioning kernels takes, at least ...
MAX_PARTITION_GRID = 1024  # ... and CUDA blocks at most (their counts are scanned: buckets x grid of them)


def launch_shape(n: int) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) for `n` elements: THREADS per block, up to MAX_BLOCKS blocks."""
    return (max(1, min(MAX_BLOCKS, -(-n // THREADS))),), (THREADS,)
