// Device functions of the fused scan kernels (gpu_kernels.fused_scan generates each kernel from a
// scan's predicate and aggregates and appends it to this source, after bits.cuh). A column is read at
// one row straight from its encoding: a bit-packed value from the aligned words it spans (cxg_bits),
// a run's value by walking the run ends from the tile's first run, a dictionary entry by its code.

// The run holding `row`: the first run whose (exclusive) end is past it (`runs` when none is).
__device__ __forceinline__ long long cxg_run(const int* __restrict__ ends, long long runs, long long row) {
    long long lo = 0, hi = runs;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (ends[mid] <= row) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// The run holding `row`, walking forward from `run` (a run at or before it): a thread's rows of a
// tile come in order, so one search per tile (cxg_run) and a few steps per row find them all.
__device__ __forceinline__ long long cxg_walk(const int* __restrict__ ends, long long& run, long long row) {
    while (ends[run] <= row) {
        ++run;
    }
    return run;
}

// The block of the device block table holding `tile`: the last whose first tile (the second field
// of its row of `fields`) is at or before it.
__device__ __forceinline__ long long cxg_block_of(const long long* __restrict__ table, long long blocks, int fields,
                                                  long long tile) {
    long long lo = 0, hi = blocks - 1;
    while (lo < hi) {
        const long long mid = (lo + hi + 1) >> 1;
        if (table[mid * fields + 1] <= tile) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// A signed value added to a sum kept as two 64-bit halves (its low 32 bits, unsigned, and its high
// 32 bits, signed, in two's complement): exact for fewer than 2^32 rows whatever the values.
__device__ __forceinline__ void cxg_add(unsigned long long* slot, long long value) {
    atomicAdd(slot, (unsigned long long)(value & 0xFFFFFFFFLL));
    atomicAdd(slot + 1, (unsigned long long)(value >> 32));
}

// The same into a thread's own two halves (registers): no atomics.
__device__ __forceinline__ void cxg_add_local(unsigned long long* halves, long long value) {
    halves[0] += (unsigned long long)(value & 0xFFFFFFFFLL);
    halves[1] += (unsigned long long)(value >> 32);
}

// A warp's sum, minimum or maximum of its lanes' values, by shuffles (a butterfly: every lane ends
// with it; every lane of the warp must call it). Unsigned sums wrap as the atomics that add them do.
__device__ __forceinline__ unsigned long long cxg_warp_sum(unsigned long long value) {
    for (int mask = 16; mask > 0; mask >>= 1) {
        value += __shfl_xor_sync(0xFFFFFFFFu, value, mask);
    }
    return value;
}

// A warp's sum of its lanes' values, each |value| < 2^26 (the sum then fits 32 bits): one
// reduction instruction from sm_80 on (where the stand-in also runs it), else shuffles.
__device__ __forceinline__ long long cxg_warp_sum26(long long value) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xFFFFFFFFu, (int)value);
#else
    return (long long)cxg_warp_sum((unsigned long long)value);
#endif
}

// The same for |value| < 2^51: its low 26 bits and the rest (shifted right by 26, rounding down)
// summed apart, each in 32 bits.
__device__ __forceinline__ long long cxg_warp_sum51(long long value) {
    const long long high = cxg_warp_sum26(value >> 26);
    return high * 67108864LL + cxg_warp_sum26(value & 0x3FFFFFFLL);
}

__device__ __forceinline__ long long cxg_warp_min(long long value) {
    for (int mask = 16; mask > 0; mask >>= 1) {
        const long long other = __shfl_xor_sync(0xFFFFFFFFu, value, mask);
        value = other < value ? other : value;
    }
    return value;
}

__device__ __forceinline__ long long cxg_warp_max(long long value) {
    for (int mask = 16; mask > 0; mask >>= 1) {
        const long long other = __shfl_xor_sync(0xFFFFFFFFu, value, mask);
        value = other > value ? other : value;
    }
    return value;
}
