"""The CUDA C kernels of `gpu_kernels/cuda/`: each compiles with NVRTC for the GPUs the project
targets within its register budget and without spills; each, compiled as C++ on the CPU (the grid's
blocks and threads run in loops), computes what the NumPy backend does for many launch shapes;
and does so cleanly under AddressSanitizer and UndefinedBehaviorSanitizer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_gpu
from benchmarks.cupy_standin import installed
from gpu_kernels import bitpack, get_backend
from gpu_kernels.cuda_kernels import ARCHES, KERNELS, launch_shape

ROOT = Path(__file__).resolve().parent.parent

SHAPES = [((1,), (1,)), ((1,), (32,)), ((3,), (7,)), ((2,), (256,)), None]  # None: the backend's own
SIZES = [1, 7, 8, 9, 255, 256, 257, 5000]


def nvrtc_compile(source: str, name: str, arch: str) -> str:
    """ptxas's report of compiling `source` with NVRTC for `arch` (no device needed)."""
    from cupy.cuda import nvrtc

    program = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", "--ptxas-options=-v", "--std=c++17"])
        return nvrtc.getProgramLog(program)
    except nvrtc.NVRTCError as e:
        raise AssertionError(f"{name} does not compile for {arch}:\n{nvrtc.getProgramLog(program)}") from e
    finally:
        nvrtc.destroyProgram(program)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_compiles_for_the_target_gpus_within_its_register_budget(name: str, arch: str) -> None:
    kernel = KERNELS[name]
    log = nvrtc_compile(kernel.source(), name, arch)
    registers = int(re.search(rf"Compiling entry function '{name}'.*?Used (\d+) registers", log, re.S)[1])
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert registers <= kernel.registers, f"{name} on {arch}: {registers} registers, budget {kernel.registers}"
    assert spills and not any(spills), f"{name} on {arch} spills: {log}"


def check_unpack(sanitize: bool = False) -> int:
    """cxg_unpack on the CPU against the NumPy backend, every width, size and launch shape; how
    many launches were compared."""
    numpy = get_backend("numpy")
    rng = np.random.default_rng(11)
    compared = 0
    with installed(sanitize=sanitize):
        import cupy

        kernel = cupy.RawModule(code=KERNELS["cxg_unpack"].source()).get_function("cxg_unpack")
        for width in (1, 3, 8, 13, 31, 32, 45, 56):
            for n in SIZES:
                values = rng.integers(0, 1 << width, n, dtype=np.uint64)
                packed = bitpack.pack(values, width)
                rows = rng.integers(0, n, n).astype(np.int64)
                expected = numpy.unpack_at(packed, width, rows)
                for shape in SHAPES:
                    grid, block = shape or launch_shape(n)
                    out = cupy.full(n, -1, dtype=cupy.int64)
                    arguments = (cupy.asarray(packed), cupy.asarray(rows), np.int64(n), np.int32(width))
                    kernel(grid, block, (*arguments, out))
                    np.testing.assert_array_equal(out.get(), expected, err_msg=f"width {width}, n {n}, {shape}")
                    compared += 1
    return compared


def check_partition(sanitize: bool = False) -> int:
    """The partitioning kernels on the CPU against the NumPy backend: every row in its bucket with
    the payload's values moved with it, counts and offsets equal; how many partitionings were
    compared."""
    numpy = get_backend("numpy")
    rng = np.random.default_rng(12)
    compared = 0
    with installed(sanitize=sanitize):
        backend = get_backend("cupy")
        for n in (1, 255, 2049, 40_000):  # within a tile, past one, many tiles over many CUDA blocks
            for buckets in (1, 16, 256, 1024):
                keys = [rng.integers(0, 1 << 63, n).astype(np.uint64) for _ in range(1 + n % 2)]
                payload = [rng.integers(-(1 << 62), 1 << 62, n), rng.random(n), rng.random(n) < 0.5]
                expected = numpy.partition_keys(keys, buckets, payload)
                on_device = [backend.asarray(k) for k in keys]
                got = backend.partition_keys(on_device, buckets, [backend.asarray(a) for a in payload])
                rows = np.arange(n)  # moved as a payload, the rows' numbers where no `order` is written
                unnumbered = backend.partition_keys(
                    on_device, buckets, [backend.asarray(a) for a in (rows, *payload)], numbered=False
                )
                assert unnumbered.order is None
                for numbers, parts in (
                    (got.order, got),
                    (unnumbered.moved[0], unnumbered._replace(moved=unnumbered.moved[1:])),
                ):
                    order, counts, offsets = (backend.to_host(a) for a in (numbers, parts.counts, parts.offsets))
                    np.testing.assert_array_equal(counts, expected.counts)
                    np.testing.assert_array_equal(offsets, expected.offsets)
                    for b in range(buckets):  # the same rows in each bucket, in whichever order
                        bucket = slice(offsets[b], offsets[b] + counts[b])
                        np.testing.assert_array_equal(np.sort(order[bucket]), expected.order[bucket])
                    for moved, values in zip(parts.moved, payload, strict=True):  # each value where its row went
                        assert backend.to_host(moved).dtype == values.dtype
                        np.testing.assert_array_equal(backend.to_host(moved), values[order])
                compared += 1
    return compared


def test_kernels_on_the_cpu_compute_what_numpy_does_for_every_launch_shape() -> None:
    assert check_unpack() == 8 * len(SIZES) * len(SHAPES)
    assert check_partition() == 16


def run_sanitized(code: str) -> str:
    """Python `code` run in a process with AddressSanitizer and UndefinedBehaviorSanitizer loaded
    (the stand-in then builds CUDA C with them), its standard output; any report fails the test."""
    runtimes = [
        subprocess.run(["g++", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
        for lib in ("libasan.so", "libubsan.so")
    ]
    if not all(os.path.isabs(path) for path in runtimes):
        pytest.skip("g++ has no sanitizer runtimes here")
    env = {
        **os.environ,
        "LD_PRELOAD": " ".join(runtimes),
        "ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0:abort_on_error=0",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr[-3000:]
    return done.stdout


WARP_PROBE = r"""
extern "C" __global__ void probe(const long long* __restrict__ in, long long* __restrict__ out) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const long long v = in[t];
    long long* o = out + 8 * t;
    o[0] = __shfl_up_sync(0xFFFFFFFFu, v, 3);
    o[1] = __shfl_down_sync(0xFFFFFFFFu, v, 5);
    o[2] = __shfl_xor_sync(0xFFFFFFFFu, v, 9);
    o[3] = __shfl_sync(0xFFFFFFFFu, v, 7);
    o[4] = __ballot_sync(0xFFFFFFFFu, v % 3 == 0);
    o[5] = __popc((unsigned int)o[4]) + 100 * __ffs((unsigned int)o[4]);
    o[6] = __reduce_add_sync(0xFFFFFFFFu, (int)v);
    o[7] = __reduce_add_sync(0xFFFFFFFFu, (unsigned int)(v * 3000000));  // wraps past 32 bits
}
"""


@pytest.mark.gpu
def test_warp_operations_on_the_cpu_follow_cuda() -> None:
    """The stand-in's warps: lanes exchange values as CUDA's full-mask shuffles and ballots define
    (a lane whose source is past the warp keeps its own value), and reduce them as its 32-bit
    reductions do (wrapping), for two CUDA blocks of two warps."""
    import cupy

    values = np.random.default_rng(8).integers(-1000, 1000, 128)
    out = cupy.empty(8 * 128, dtype=cupy.int64)
    cupy.RawModule(code=WARP_PROBE).get_function("probe")((2,), (64,), (cupy.asarray(values), out))
    got = cupy.asnumpy(out).reshape(128, 8)
    for t in range(128):
        warp, lane = values[t - t % 32 : t - t % 32 + 32], t % 32
        ballot = sum(1 << i for i, v in enumerate(warp) if v % 3 == 0)
        expected = [
            warp[lane - 3] if lane >= 3 else warp[lane],
            warp[lane + 5] if lane + 5 < 32 else warp[lane],
            warp[lane ^ 9],
            warp[7],
            ballot,
            bin(ballot).count("1") + 100 * ((ballot & -ballot).bit_length()),
            int(warp.sum()),
            int(sum(int(x) * 3000000 for x in warp) % (1 << 32)),
        ]
        assert list(got[t]) == expected, t


@pytest.mark.slow
def test_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers() -> None:
    code = "from tests.test_cuda_kernels import check_partition, check_unpack\n"
    code += "print(check_unpack(sanitize=True), check_partition(sanitize=True))"
    out = run_sanitized(code)
    assert [int(n) for n in out.split()[-2:]] == [8 * len(SIZES) * len(SHAPES), 16]


def test_the_gpu_benchmark_counts_launches_and_waits_per_query_on_the_stand_in(tmp_path) -> None:
    """Through the prepared command a GPU machine runs (scripts/gpu_bench.sh), its output kept."""
    options = ["--dry-run", "--sf", "0.01", "--block-rows", "1000"]  # answers checked against NumPy's
    done = subprocess.run([ROOT / "scripts" / "gpu_bench.sh", tmp_path, *options], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "launches" in (tmp_path / "gpu.log").read_text()
    figures = json.loads((tmp_path / "gpu.json").read_text())["queries"]
    assert set(figures) == {
        "Q1",
        "Q6",
        "sorted, selective",
        "sorted, unselective",
        "unsorted, selective",
        "unsorted, unselective",
        "projection, sorted range",
        "projection, unsorted range",
        "projection, partitioned",
    }
    assert figures["Q1"]["fused"]["blocks"] > 50
    for name, q in figures.items():
        general, fused = q["general"], q["fused"]
        assert fused["blocks"] == general["blocks"] > 0, name
        if name.startswith("projection"):  # the rows counted, then the answer: two waits, whatever the blocks
            partitioning = 14 if "partitioned" in name else 0  # the stand-in counts every CuPy operation
            assert fused["syncs"] == 2 and fused["launches"] <= 6 + partitioning, (name, fused)
        else:
            assert fused["syncs"] == 1 and fused["launches"] <= 4, (name, fused)
        assert general["syncs"] > general["blocks"] and general["launches"] > 3 * general["blocks"], (name, general)
        assert fused["to_device_bytes"] == 0 < fused["first_to_device_bytes"], (name, fused)  # all kept on the device
        assert fused["to_host_pinned_bytes"] == fused["to_host_bytes"] > 0, (name, fused)  # back into pinned memory


def test_the_timed_gpu_benchmark_runs_end_to_end_on_the_stand_in(tmp_path) -> None:
    out = tmp_path / "timed.json"
    bench_gpu.main(["--standin", "--repeat", "1", "--json", str(out)])  # stops at any answer unlike NumPy's
    figures = json.loads(out.read_text())
    checks = figures["checks"]
    assert checks["operations"] > 0 and checks["fused_scans"] > 0 and checks["fused_projections"] > 0
    assert set(figures["scans"]) - {"blocks"} == set(bench_gpu.QUERIES) | set(bench_gpu.PROJECTIONS)
    scans = [q for n, q in figures["scans"].items() if n != "blocks"]
    assert all(q["resident_s"] > 0 and q["plan_s"] > 0 and q["scan_s"] > 0 and q["overlap"] > 0 for q in scans)
    assert all(q["streamed_s"] > 0 and q["streamed_overlap"] > 0 for q in scans)  # from host memory too
    service = figures["service"]  # through HTTP, every answer DuckDB's
    assert set(service) == {"Q1", "Q6", "projection"}
    assert all(q["cupy_s"] > 0 and q["numpy_s"] > 0 and q["duckdb_s"] > 0 for q in service.values())
    assert len(figures["compressed_transfer"]) == 2 * 9 and set(figures["partitioning"]) == {"16", "256"}
    assert set(figures["ceilings"]) == set(bench_gpu.CEILINGS)
    assert all(v > 0 for v in figures["ceilings"].values())


def test_the_wheels_a_gpu_machine_is_given_are_the_pinned_packages() -> None:
    """scripts/gpu_wheels.sh downloads, at the project's pins, what the benchmark needs beyond a
    CUDA image's Python; each name it lists must be pinned in pyproject.toml."""
    needs = re.search(r"^needs=\((.*)\)$", (ROOT / "scripts" / "gpu_wheels.sh").read_text(), re.M)[1].split()
    text = (ROOT / "pyproject.toml").read_text()
    assert needs and all(re.search(rf'"{name}==[\d.]+"', text) for name in needs), needs


def test_a_stage_or_query_of_the_timed_run_that_fails_is_recorded_and_the_rest_reported(capsys) -> None:
    """Time on a device is short: a stage or query that raises is kept as failed in the figures,
    the rest still measured and reported, and the run then exits with what failed; an answer unlike
    NumPy's (SystemExit) still stops it at once."""
    value, failure = bench_gpu.attempted(lambda: 1 // 0)
    assert value is None and failure == "ZeroDivisionError: integer division or modulo by zero"
    assert bench_gpu.attempted(lambda: 7) == (7, None)
    with pytest.raises(SystemExit):
        bench_gpu.attempted(lambda: sys.exit("Q6: CuPy answers 1, NumPy 2"))
    scans = {name: {"failed": "RuntimeError: no kernel"} for name in list(bench_gpu.SCANS)[:-1]}  # the last not run
    figures = {"device": "a GPU", "sf": 10, "scans": {"blocks": 176, **scans}, "failed": {"partitioning": "E: x"}}
    with pytest.raises(SystemExit, match="failed: partitioning, Q1, Q6"):
        bench_gpu.reported(figures)
    out = capsys.readouterr().out
    assert "lineitem SF 10 (176 blocks)" in out and "partitioning failed" in out and "Q6 failed" in out
    assert "not run" in out
