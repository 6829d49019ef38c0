// Device functions of the fused projection kernels (gpu_kernels.fused_project generates each pair of
// kernels from a scan's predicate and outputs and appends it to this source, after fused_scan.cu).

// A tile's holding rows ranked in row order with one scan for all of a thread's rows: `held` has
// bit 16k set where the thread's row k (of at most four, THREADS apart) holds, so that adding such
// words adds four 16-bit counts at once. A Hillis-Steele scan over the CUDA block's threads in
// shared memory (`scratch`, blockDim.x words) gives, per k, the holding rows k of the threads before
// this one (returned) and of all of them (`total`). A count never passes blockDim.x, so no field
// carries into the next.
__device__ __forceinline__ unsigned long long cxg_tile_rank(unsigned long long held, unsigned long long* scratch,
                                                            unsigned long long* total) {
    scratch[threadIdx.x] = held;
    __syncthreads();
    for (unsigned int offset = 1; offset < blockDim.x; offset <<= 1) {
        const unsigned long long before = threadIdx.x >= offset ? scratch[threadIdx.x - offset] : 0ULL;
        __syncthreads();
        scratch[threadIdx.x] += before;
        __syncthreads();
    }
    *total = scratch[blockDim.x - 1];
    const unsigned long long inclusive = scratch[threadIdx.x];
    __syncthreads();  // the next tile's scan writes `scratch` again
    return inclusive - held;
}

// Field k (a 16-bit count) of a packed word.
__device__ __forceinline__ long long cxg_field(unsigned long long packed, int k) {
    return (long long)((packed >> (16 * k)) & 0xFFFFULL);
}
