// Shared by every kernel source of gpu_kernels/cuda (prepended by gpu_kernels.cuda_kernels.cuda_source).

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
