// A CUDA block's scan, shared by the kernels that rank a tile's rows (gpu_kernels.fused_project, partition.cu).

// Four 16-bit counts per thread (count k in bits 16k to 16k + 15 of `held`) scanned over a CUDA
// block, one addition adding all four: each warp scans its lanes' words with shuffles, and the
// warps' totals meet in shared memory (`warps`, a word per warp of the CUDA block). Returns each
// count summed over the threads before this one, and sets `total` to the sums over all of them.
// Each count's sum over the CUDA block stays below 2^16, so no field carries into the next.
// blockDim.x is a multiple of 32.
__device__ __forceinline__ unsigned long long cxg_tile_rank(unsigned long long held, unsigned long long* warps,
                                                            unsigned long long* total) {
    const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned long long inclusive = held;
    for (unsigned int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long before = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
        if (lane >= offset) {
            inclusive += before;
        }
    }
    if (lane == 31) {
        warps[warp] = inclusive;
    }
    __syncthreads();
    unsigned long long earlier = 0, all = 0;
    for (unsigned int w = 0; w < blockDim.x / 32; ++w) {
        const unsigned long long words = warps[w];
        earlier += w < warp ? words : 0ULL;
        all += words;
    }
    *total = all;
    __syncthreads();  // the next tile's scan writes `warps` again
    return earlier + inclusive - held;
}


// Count k of a word of four 16-bit counts.
__device__ __forceinline__ long long cxg_field(unsigned long long packed, int k) {
    return (long long)((packed >> (16 * k)) & 0xFFFFULL);
}
