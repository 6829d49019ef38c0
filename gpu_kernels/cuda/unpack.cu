// Bit-packed values at the given rows (gpu_kernels.bitpack's layout): one thread per row, in a
// grid-stride loop, each reading only the bytes its value spans (cxg_bits, bits.cuh).
extern "C" __global__ void cxg_unpack(const unsigned char* __restrict__ packed, const long long* __restrict__ rows,
                                      long long n, int width, long long* __restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = cxg_bits(packed, rows[i], width);
    }
}
