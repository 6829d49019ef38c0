// Device functions of the fused scan kernels (gpu_kernels.fused_scan generates each kernel from a
// scan's predicate and aggregates and appends it to this source, after bits.cuh). A column is read at
// one row straight from its encoding: a bit-packed value from the bytes it spans (cxg_bits), a run's
// value by a binary search of the run ends, a dictionary entry by its code.

// The run holding `row`: the first run whose (exclusive) end is past it.
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

// A signed value added to a sum kept as two 64-bit halves (its low 32 bits, unsigned, and its high
// 32 bits, signed, in two's complement): exact for fewer than 2^32 rows whatever the values.
__device__ __forceinline__ void cxg_add(unsigned long long* slot, long long value) {
    atomicAdd(slot, (unsigned long long)(value & 0xFFFFFFFFLL));
    atomicAdd(slot + 1, (unsigned long long)(value >> 32));
}
