// Hash partitioning (gpu_kernels.partition): each row's bucket is the placement hash of its key
// columns (splitmix64 chained over their uint64 hash inputs, gpu_kernels.placement_hash) mod the
// buckets, computed in the kernel that uses it. Each CUDA block takes a contiguous share of the
// rows: cxg_bucket_counts counts its rows per bucket in shared memory (a warp's rows of one bucket
// by one atomic, as below), an exclusive scan of the counts (bucket-major, so that it gives each
// CUDA block's start in each bucket) follows, and cxg_bucket_scatter moves the rows, with their
// payload, to their buckets' places.
//
// The scatter is write-combined: a CUDA block takes its share a tile of CXG_TILE rows at a time,
// ranks the tile's rows within their buckets (a warp's lanes of one bucket found by ballots over
// the bucket's bits, one shared atomic per bucket a warp holds), scans the tile's counts per bucket
// and stages the tile's rows bucket by bucket in shared memory. Its threads then write the staged
// rows in that order: consecutive threads write consecutive places of a bucket, so the writes of a
// tile are as many runs as it has buckets, not one scattered write per row. Each row's number goes
// to `order` (where asked) and each payload column's value to the same place of `moved`. Within a
// bucket, the rows of a CUDA block come in the order its warps reach them.

#define CXG_MAX_BUCKETS 1024  // four per thread in the scan of a tile's counts
#define CXG_ITEMS 8           // rows per thread in a tile
#define CXG_TILE (CXG_ITEMS * 256)

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

// Bits enough for the numbers 0 .. buckets (`buckets` marks a lane with no row).
__device__ __forceinline__ int cxg_bucket_bits(int buckets) {
    int bits = 0;
    while ((1 << bits) <= buckets) {
        ++bits;
    }
    return bits;
}

// The lanes of this warp whose `bucket` is this lane's: a ballot per bit of the buckets' numbers.
__device__ __forceinline__ unsigned int cxg_same_bucket(int bucket, int bits) {
    unsigned int same = 0xFFFFFFFFu;
    for (int k = 0; k < bits; ++k) {
        const int bit = (bucket >> k) & 1;
        const unsigned int set = __ballot_sync(0xFFFFFFFFu, bit);
        same &= bit ? set : ~set;
    }
    return same;
}

// Each CUDA block's rows per bucket: a warp's lanes of one bucket are counted by one shared atomic.
extern "C" __global__ void cxg_bucket_counts(const unsigned long long* __restrict__ keys, long long n, int columns,
                                             int buckets, long long* __restrict__ counts) {
    __shared__ unsigned int histogram[CXG_MAX_BUCKETS];
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        histogram[b] = 0;
    }
    __syncthreads();
    long long begin, end;
    cxg_share(n, &begin, &end);
    const int bits = cxg_bucket_bits(buckets);
    const unsigned int below = (1u << (threadIdx.x % 32)) - 1u;
    for (long long first = begin; first < end; first += blockDim.x) {  // as many steps for every lane
        const long long r = first + threadIdx.x;
        const int bucket = r < end ? cxg_bucket(keys, n, columns, r, buckets) : buckets;
        const unsigned int same = cxg_same_bucket(bucket, bits);
        if ((same & below) == 0 && bucket < buckets) {
            atomicAdd(&histogram[bucket], (unsigned int)__popc(same));
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        counts[(long long)b * gridDim.x + blockIdx.x] = histogram[b];
    }
}

// Launched with 256 threads per CUDA block (CXG_TILE) and cxg_bucket_counts' grid (the same shares),
// over `width` payload columns of 64-bit values (one after another, `n` each) moved with the rows
// into `moved`; the rows' numbers go to `order` only where `numbered` (a caller moving its payload
// needs none: a fifth less to write for one key moved). Five CUDA blocks per multiprocessor bound
// the registers (48, no spills).
extern "C" __global__ void __launch_bounds__(256, 5)
    cxg_bucket_scatter(const unsigned long long* __restrict__ keys, long long n, int columns, int buckets,
                       const long long* __restrict__ starts, const long long* __restrict__ payload, int width,
                       int numbered, long long* __restrict__ order, long long* __restrict__ moved) {
    __shared__ unsigned long long cursor[CXG_MAX_BUCKETS];  // the next place of each bucket
    __shared__ unsigned int tile_count[CXG_MAX_BUCKETS];    // the tile's rows per bucket ...
    __shared__ unsigned int tile_start[CXG_MAX_BUCKETS];    // ... and where they start in the staged tile
    __shared__ unsigned short staged_row[CXG_TILE];         // the tile's rows, bucket by bucket ...
    __shared__ unsigned short staged_bucket[CXG_TILE];      // ... and their buckets
    __shared__ unsigned long long warps[8];
    for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
        cursor[b] = (unsigned long long)starts[(long long)b * gridDim.x + blockIdx.x];
        tile_count[b] = 0;
    }
    const int bits = cxg_bucket_bits(buckets);
    const unsigned int below = (1u << (threadIdx.x % 32)) - 1u;
    __syncthreads();
    long long begin, end;
    cxg_share(n, &begin, &end);
    for (long long first = begin; first < end; first += CXG_TILE) {
        unsigned int placed[CXG_ITEMS];  // bucket << 16 | rank within the bucket in the tile
        for (int k = 0; k < CXG_ITEMS; ++k) {
            const long long r = first + k * 256 + threadIdx.x;
            const int bucket = r < end ? cxg_bucket(keys, n, columns, r, buckets) : buckets;
            const unsigned int same = cxg_same_bucket(bucket, bits);
            unsigned int at = 0;
            if ((same & below) == 0 && bucket < buckets) {  // the warp's first lane of its bucket
                at = atomicAdd(&tile_count[bucket], (unsigned int)__popc(same));
            }
            at = __shfl_sync(0xFFFFFFFFu, at, __ffs(same) - 1) + (unsigned int)__popc(same & below);
            placed[k] = ((unsigned int)bucket << 16) | at;
        }
        __syncthreads();
        unsigned long long held = 0;  // the tile's counts of buckets 4t .. 4t + 3
        for (int k = 0; k < 4; ++k) {
            const int b = 4 * threadIdx.x + k;
            held |= (unsigned long long)(b < buckets ? tile_count[b] : 0u) << (16 * k);
        }
        unsigned long long total;
        const unsigned long long before = cxg_tile_rank(held, warps, &total);
        long long start = 0;
        for (int k = 0; k < 4; ++k) {
            start += cxg_field(before, k);
        }
        for (int k = 0; k < 4; ++k) {
            const int b = 4 * threadIdx.x + k;
            if (b < buckets) {
                tile_start[b] = (unsigned int)start;
            }
            start += cxg_field(held, k);
        }
        __syncthreads();
        for (int k = 0; k < CXG_ITEMS; ++k) {
            const int bucket = (int)(placed[k] >> 16);
            if (bucket < buckets) {
                const unsigned int slot = tile_start[bucket] + (placed[k] & 0xFFFFu);
                staged_row[slot] = (unsigned short)(k * 256 + threadIdx.x);
                staged_bucket[slot] = (unsigned short)bucket;
            }
        }
        __syncthreads();
        const int rows = end - first < CXG_TILE ? (int)(end - first) : CXG_TILE;
        for (int slot = threadIdx.x; slot < rows; slot += blockDim.x) {
            const int bucket = staged_bucket[slot];
            const long long to = (long long)cursor[bucket] + (slot - (int)tile_start[bucket]);
            const long long from = first + staged_row[slot];
            if (numbered) {
                order[to] = from;
            }
            for (int c = 0; c < width; ++c) {
                moved[c * n + to] = payload[c * n + from];
            }
        }
        __syncthreads();
        for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
            cursor[b] += tile_count[b];
            tile_count[b] = 0;
        }
        __syncthreads();
    }
}
