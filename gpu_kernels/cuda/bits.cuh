// Shared by every kernel source of gpu_kernels/cuda (prepended by gpu_kernels.cuda_kernels.cuda_source).

// Bit-packed value of `row` (gpu_kernels.bitpack's layout) from the one or two aligned 64-bit words
// it spans. The buffer starts on an 8-byte boundary (device allocations; each block's part in a
// gpu_kernels.column_image buffer) and its 8 bytes of slack keep both words inside it.
__device__ __forceinline__ long long cxg_bits(const unsigned char* __restrict__ packed, long long row, int width) {
    const unsigned long long bit = (unsigned long long)row * (unsigned long long)width;
    const unsigned long long* __restrict__ words = (const unsigned long long*)packed;
    const unsigned long long at = bit >> 6;
    const int shift = (int)(bit & 63);
    unsigned long long value = words[at] >> shift;
    if (shift + width > 64) {
        value |= words[at + 1] << (64 - shift);
    }
    return (long long)(value & ((1ULL << width) - 1ULL));
}
