// Device functions of the fused projection kernels (gpu_kernels.fused_project generates each pair of
// kernels from a scan's predicate and outputs and appends it to this source, after fused_scan.cu).

// A tile's holding rows ranked in row order with one scan for all of a thread's rows: `held` has
// bit 16k set where the thread's row k (of at most four, THREADS apart) holds, so that adding such
// words adds four 16-bit counts at once. Each warp scans its lanes' words with shuffles; the warps'
// totals meet in shared memory (`warps`, a word per warp of the CUDA block). Returns, per k, the
// holding rows k of the threads before this one, and sets `total` to those of all of them. A count
// never passes blockDim.x, so no field carries into the next. blockDim.x is a multiple of 32.
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

// Field k (a 16-bit count) of a packed word.
__device__ __forceinline__ long long cxg_field(unsigned long long packed, int k) {
    return (long long)((packed >> (16 * k)) & 0xFFFFULL);
}
