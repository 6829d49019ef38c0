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
// 32 bits, signed, in two's complement): exact for fewer than 2^32 rows whatever the values. Each
// half is added as its two 32-bit words by native 32-bit atomics (a 64-bit one on shared memory is a
// compare-and-swap loop on sm_90): a low word's wrap is carried into its high word by the one thread
// whose add wrapped it (atomicAdd hands it the word before), so every 64-bit half is what 64-bit
// adds make of it. A value of 0 to 2^32 - 1 is one atomic (two where it wraps its word), a negative
// one two to four.
__device__ __forceinline__ void cxg_add(unsigned long long* slot, long long value) {
    unsigned int* word = (unsigned int*)slot;  // little-endian: the low half's low and high word, the high half's
    const unsigned int low = (unsigned int)(value & 0xFFFFFFFFLL);
    if (low != 0u && atomicAdd(&word[0], low) > 0xFFFFFFFFu - low) {
        atomicAdd(&word[1], 1u);
    }
    const unsigned long long high = (unsigned long long)(value >> 32);
    const unsigned int part = (unsigned int)high;
    unsigned int next = (unsigned int)(high >> 32);  // 0, or all ones where the value is negative
    if (part != 0u && atomicAdd(&word[2], part) > 0xFFFFFFFFu - part) {
        next += 1u;
    }
    if (next != 0u) {
        atomicAdd(&word[3], next);
    }
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
