// Bit-packed values at the given rows (gpu_kernels.bitpack's layout: value r occupies bits
// [r*width, (r+1)*width), least significant first). One thread per row, in a grid-stride loop:
// it reads the bytes its value spans (at most 8: width <= 56 plus a shift below 8), then shifts
// and masks. The packed buffer carries 8 bytes of slack, so no read passes its end.
extern "C" __global__ void cxg_unpack(const unsigned char* __restrict__ packed, const long long* __restrict__ rows,
                                      long long n, int width, unsigned long long mask,
                                      long long* __restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long bit = (unsigned long long)rows[i] * (unsigned long long)width;
        const unsigned char* bytes = packed + (bit >> 3);
        const int shift = (int)(bit & 7);
        const int span = (shift + width + 7) >> 3;
        unsigned long long word = 0;
        for (int k = 0; k < span; ++k) {
            word |= (unsigned long long)bytes[k] << (8 * k);
        }
        out[i] = (long long)((word >> shift) & mask);
    }
}
