// Hash partitioning (gpu_kernels.partition): each row's bucket is the placement hash of its key
// columns (splitmix64 chained over their uint64 hash inputs, gpu_kernels.placement_hash) mod the
// buckets, computed in the kernel that uses it. Each CUDA block takes a contiguous share of the
// rows: cxg_bucket_counts counts its rows per bucket in shared memory, an exclusive scan of the
// counts (bucket-major, so that it gives each CUDA block's start in each bucket) follows, and
// cxg_bucket_scatter writes each row's number at its bucket's next place. Within a bucket the rows
// of a CUDA block come in the order its threads reach them.

#define CXG_MAX_BUCKETS 4096

__device__ __forceinline__ unsigned long long cxg_splitmix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The bucket of `row`: `keys` holds the key columns' hash inputs one column after another.
__device__ __forceinline__ int cxg_bucket(const unsigned long long* __restrict__ keys, long long n, int columns,
                                          long long row, int buckets) {
    unsigned long long h = 0x9E3779B97F4A7C15ULL;
    for (int c = 0; c < columns; ++c) {
        h = cxg_splitmix64(h ^ keys[c * n + row]);
    }
    return (int)(h % (unsigned long long)buckets);
}

// The rows [begin, end) of this CUDA block's share.
__device__ __forceinline__ void cxg_share(long long n, long long* begin, long long* end) {
    const long long share = (n + gridDim.x - 1) / gridDim.x;
    *begin = share * blockIdx.x;
    *end = *begin + share < n ? *begin + share : n;
}

extern "C" __global__ void cxg_bucket_counts(const unsigned long long* __restrict__ keys, long long n, int columns,
                                             int buckets, long long* __restrict__ counts) {
    __shared__ unsigned int histogram[CXG_MAX_BUCKETS];
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        histogram[b] = 0;
    }
    __syncthreads();
    long long begin, end;
    cxg_share(n, &begin, &end);
    for (long long r = begin + threadIdx.x; r < end; r += blockDim.x) {
        atomicAdd(&histogram[cxg_bucket(keys, n, columns, r, buckets)], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        counts[(long long)b * gridDim.x + blockIdx.x] = histogram[b];
    }
}

extern "C" __global__ void cxg_bucket_scatter(const unsigned long long* __restrict__ keys, long long n, int columns,
                                              int buckets, const long long* __restrict__ starts,
                                              long long* __restrict__ order) {
    __shared__ unsigned long long cursor[CXG_MAX_BUCKETS];
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        cursor[b] = (unsigned long long)starts[(long long)b * gridDim.x + blockIdx.x];
    }
    __syncthreads();
    long long begin, end;
    cxg_share(n, &begin, &end);
    for (long long r = begin + threadIdx.x; r < end; r += blockDim.x) {
        const unsigned long long at = atomicAdd(&cursor[cxg_bucket(keys, n, columns, r, buckets)], 1ULL);
        order[at] = r;
    }
}
