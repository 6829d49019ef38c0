// Device functions of the fused scan kernels (gpu_kernels.fused_scan generates each kernel from a
// scan's predicate and aggregates and appends it to this source). A column is read at one row
// straight from its encoding: a bit-packed value from the bytes it spans, a run's value by a binary
// search of the run ends, a dictionary entry by its code.

// Bit-packed value of `row` (gpu_kernels.bitpack's layout; the buffer's 8 bytes of slack keep the
// reads inside it).
__device__ __forceinline__ long long cxg_bits(const unsigned char* __restrict__ packed, long long row, int width) {
    const unsigned long long bit = (unsigned long long)row * (unsigned long long)width;
    const unsigned char* bytes = packed + (bit >> 3);
    const int shift = (int)(bit & 7);
    const int span = (shift + width + 7) >> 3;
    unsigned long long word = 0;
    for (int k = 0; k < span; ++k) {
        word |= (unsigned long long)bytes[k] << (8 * k);
    }
    return (long long)((word >> shift) & ((1ULL << width) - 1ULL));
}

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
