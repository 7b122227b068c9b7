/*
 * cub_replay.cu: an allocation trace replayed through CUB's real
 * CachingDeviceAllocator (the CUDA Toolkit's <cub/util_allocator.cuh>), the
 * ground truth for cupola's model of it (kind = "cub", src/core/pool/cub.c).
 *
 *   gzip -dc trace.csv.gz | cub_replay NAME MODE RUNS SETTING...
 *
 * The trace is RMM's logging-adaptor CSV (Thread,Time,Action,Pointer,Size,
 * Stream) on stdin, as cupola.trace.load reads it.  SETTING is
 * "bin_growth,min_bin,max_bin,max_cached_bytes" (CUB's default constructor
 * is "8,3,7,6291455"); each makes a fresh allocator through CUB's
 * four-argument constructor and replays the whole trace RUNS times.
 *
 * The replay does what cupola.trace.replay does: trace stream 0 is the
 * legacy default stream and every other stream value its own non-blocking
 * CUDA stream; rows in order, an allocate as DeviceAllocate(bytes, stream), a
 * free as DeviceFree (CUB records the block's ready event on the stream it
 * was allocated on, which is the stream the rows free on); blocks the trace
 * never frees are freed at the end in allocation order; the figures are read
 * then, before the allocator's destructor empties the cache.
 *
 * MODE says when events complete:
 *   sync   cudaDeviceSynchronize() before every DeviceAllocate, so every
 *          ready event recorded so far has completed when CUB queries it:
 *          the outcome does not depend on timing, and it is what cupola's
 *          model computes over the virtual upstream (every free complete).
 *   free   no synchronization: whether another stream may take a block
 *          depends on how far the GPU is; RUNS runs show the spread.
 * The streams carry no work but CUB's event records.
 *
 * Counting, exactly: the CUDA runtime is linked dynamically (-cudart shared)
 * and the link redirects this program's calls of cudaMalloc and cudaFree
 * (-Wl,--wrap=cudaMalloc,--wrap=cudaFree) to __wrap_cudaMalloc and
 * __wrap_cudaFree below, which count and call the runtime's own
 * (__real_cudaMalloc: the runtime's symbol).  So every call CUB makes passes
 * through the counters: calls, failures, bytes held (a map from pointer to
 * size), and its peak.  (A definition named cudaMalloc cannot be compiled
 * here: the device runtime's header defines one for device code.)  After every row the bytes held are checked against CUB's own
 * cached_bytes (live + free) for the device; a difference is counted in
 * `mismatch` (0 means both ways of counting agree).
 *
 * Output: '#' lines, then CSV lines
 *   trace,setting,mode,run,events,allocs,failed,mallocs,malloc_failures,frees,
 *   peak_held,end_held,mismatch,seconds
 * Exit status non-zero on a CUDA error other than out of memory, or a
 * malformed trace.
 *
 * Build: nvcc -O2 -std=c++17 -arch=sm_90 -cudart shared
 *          -I$CUDA_HOME/include/cccl -Xlinker --wrap=cudaMalloc
 *          -Xlinker --wrap=cudaFree -o cub_replay bench/cub_replay.cu
 */
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>

#include <cub/util_allocator.cuh>

namespace {

/* ---- the counters behind cudaMalloc and cudaFree ---- */
struct Counts {
    uint64_t mallocs = 0, malloc_failures = 0, frees = 0;
    uint64_t held = 0, peak = 0;
    std::unordered_map<uintptr_t, size_t> sizes;
};
Counts counts;

bool wrapped = false; /* set by the wrappers: proof that the link redirected */

} // namespace

extern "C" cudaError_t __real_cudaMalloc(void **p, size_t bytes);
extern "C" cudaError_t __real_cudaFree(void *p);

extern "C" cudaError_t __wrap_cudaMalloc(void **p, size_t bytes)
{
    cudaError_t e = __real_cudaMalloc(p, bytes);
    wrapped = true;
    counts.mallocs++;
    if (e != cudaSuccess) {
        counts.malloc_failures++;
        return e;
    }
    counts.sizes[reinterpret_cast<uintptr_t>(*p)] = bytes;
    counts.held += bytes;
    if (counts.held > counts.peak)
        counts.peak = counts.held;
    return e;
}

extern "C" cudaError_t __wrap_cudaFree(void *p)
{
    cudaError_t e = __real_cudaFree(p);
    wrapped = true;
    if (e == cudaSuccess && p) {
        auto it = counts.sizes.find(reinterpret_cast<uintptr_t>(p));
        if (it != counts.sizes.end()) {
            counts.held -= it->second;
            counts.sizes.erase(it);
        }
        counts.frees++;
    }
    return e;
}

namespace {

void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        std::fprintf(stderr, "cub_replay: %s: %s: %s\n", what, cudaGetErrorName(e),
                     cudaGetErrorString(e));
        std::exit(1);
    }
}

struct Row {
    bool is_free;
    uint64_t ptr, size, stream;
    uint32_t ord; /* allocation ordinal (frees: their allocation's) */
};

struct Trace {
    std::vector<Row> rows;
    std::vector<uint64_t> streams; /* distinct values, in order of appearance */
    std::vector<uint32_t> row_stream;
    uint32_t nallocs = 0;
};

bool read_trace(FILE *f, Trace &t)
{
    char line[512];
    std::unordered_map<uint64_t, uint32_t> live, sidx;
    std::vector<uint64_t> osize;
    unsigned long lineno = 0;
    while (std::fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1 && std::strncmp(line, "Thread", 6) == 0)
            continue;
        char *col[6];
        int n = 0;
        char *p = line;
        col[n++] = p;
        while (*p && n < 6) {
            if (*p == ',') {
                *p = '\0';
                col[n++] = p + 1;
            }
            p++;
        }
        if (n < 6) {
            std::fprintf(stderr, "cub_replay: line %lu: fewer than 6 columns\n", lineno);
            return false;
        }
        Row r;
        r.is_free = std::strncmp(col[2], "free", 4) == 0;
        if (!r.is_free && std::strncmp(col[2], "allocate", 8) != 0) {
            std::fprintf(stderr, "cub_replay: line %lu: action '%s'\n", lineno, col[2]);
            return false;
        }
        r.ptr = std::strtoull(col[3], nullptr, 16);
        r.size = std::strtoull(col[4], nullptr, 10);
        r.stream = std::strtoull(col[5], nullptr, 16);
        if (!r.is_free) {
            if (live.count(r.ptr)) {
                std::fprintf(stderr, "cub_replay: line %lu: allocate of a live pointer\n", lineno);
                return false;
            }
            r.ord = t.nallocs++;
            live[r.ptr] = r.ord;
            osize.push_back(r.size);
        } else {
            auto it = live.find(r.ptr);
            if (it == live.end()) {
                std::fprintf(stderr, "cub_replay: line %lu: free of a pointer not live\n", lineno);
                return false;
            }
            r.ord = it->second;
            live.erase(it);
            if (r.size == 0)
                r.size = osize[r.ord];
        }
        auto s = sidx.find(r.stream);
        if (s == sidx.end()) {
            s = sidx.emplace(r.stream, (uint32_t)t.streams.size()).first;
            t.streams.push_back(r.stream);
        }
        t.row_stream.push_back(s->second);
        t.rows.push_back(r);
    }
    return true;
}

struct Setting {
    unsigned growth, min_bin, max_bin;
    size_t max_cached;
    std::string text;
};

bool parse_setting(const char *s, Setting &out)
{
    unsigned long long a, b, c, d;
    if (std::sscanf(s, "%llu,%llu,%llu,%llu", &a, &b, &c, &d) != 4)
        return false;
    out.growth = (unsigned)a;
    out.min_bin = (unsigned)b;
    out.max_bin = (unsigned)c;
    out.max_cached = (size_t)d;
    out.text = s;
    return true;
}

void replay(const char *name, const Trace &t, const Setting &set, bool sync, int run)
{
    std::vector<cudaStream_t> sv(t.streams.size(), nullptr);
    for (size_t k = 0; k < t.streams.size(); k++)
        if (t.streams[k] != 0)
            check(cudaStreamCreateWithFlags(&sv[k], cudaStreamNonBlocking), "cudaStreamCreate");
    std::vector<void *> blk(t.nallocs, nullptr);
    uint64_t allocs = 0, failed = 0, mismatch = 0;
    Counts before = counts;
    uint64_t peak0 = counts.held;
    counts.peak = counts.held;
    auto t0 = std::chrono::steady_clock::now();
    {
        cub::CachingDeviceAllocator a(set.growth, set.min_bin, set.max_bin, set.max_cached);
        auto held_ok = [&]() {
            auto it = a.cached_bytes.find(0);
            uint64_t cub_held = it == a.cached_bytes.end() ? 0 : it->second.live + it->second.free;
            return cub_held == counts.held - peak0;
        };
        for (size_t i = 0; i < t.rows.size(); i++) {
            const Row &r = t.rows[i];
            cudaStream_t s = sv[t.row_stream[i]];
            if (!r.is_free) {
                if (sync)
                    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
                void *p = nullptr;
                cudaError_t e = a.DeviceAllocate(&p, (size_t)r.size, s);
                if (e == cudaErrorMemoryAllocation) {
                    (void)cudaGetLastError();
                    failed++;
                    p = nullptr;
                } else {
                    check(e, "DeviceAllocate");
                    allocs++;
                }
                blk[r.ord] = p;
            } else if (blk[r.ord]) {
                check(a.DeviceFree(blk[r.ord]), "DeviceFree");
                blk[r.ord] = nullptr;
            }
            mismatch += !held_ok();
        }
        for (uint32_t k = 0; k < t.nallocs; k++) {
            if (blk[k]) {
                check(a.DeviceFree(blk[k]), "DeviceFree");
                blk[k] = nullptr;
                mismatch += !held_ok();
            }
        }
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s,%s,%s,%d,%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                    ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f\n",
                    name, set.text.c_str(), sync ? "sync" : "free", run, t.rows.size(), allocs,
                    failed, counts.mallocs - before.mallocs,
                    counts.malloc_failures - before.malloc_failures, counts.frees - before.frees,
                    counts.peak - peak0, counts.held - peak0, mismatch, sec);
        std::fflush(stdout);
    } /* the destructor frees the cache (FreeAllCached): not counted above */
    for (cudaStream_t s : sv)
        if (s)
            check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 5) {
        std::fprintf(stderr, "usage: gzip -dc trace.csv.gz | cub_replay NAME sync|free RUNS "
                             "growth,min_bin,max_bin,max_cached_bytes ...\n");
        return 2;
    }
    const char *name = argv[1];
    bool sync = std::strcmp(argv[2], "sync") == 0;
    if (!sync && std::strcmp(argv[2], "free") != 0) {
        std::fprintf(stderr, "cub_replay: MODE must be sync or free, not %s\n", argv[2]);
        return 2;
    }
    int runs = std::atoi(argv[3]);
    if (runs < 1)
        runs = 1;
    std::vector<Setting> sets;
    for (int i = 4; i < argc; i++) {
        Setting s;
        if (!parse_setting(argv[i], s)) {
            std::fprintf(stderr, "cub_replay: setting '%s' is not growth,min,max,max_cached\n",
                         argv[i]);
            return 2;
        }
        sets.push_back(s);
    }
    Trace t;
    if (!read_trace(stdin, t))
        return 1;
    check(cudaFree(nullptr), "context creation");
    if (!wrapped) {
        std::fprintf(stderr, "cub_replay: cudaFree did not pass through the counters (built "
                             "without -Xlinker --wrap=cudaFree?)\n");
        return 2;
    }
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    std::printf("# cub_replay: %s on %s (runtime %d, CUB %d.%d.%d), %zu rows, %zu streams, %u "
                "allocations\n", name, prop.name, rt, CUB_MAJOR_VERSION, CUB_MINOR_VERSION,
                CUB_SUBMINOR_VERSION, t.rows.size(), t.streams.size(), t.nallocs);
    for (const Setting &s : sets)
        for (int run = 1; run <= runs; run++)
            replay(name, t, s, sync, run);
    return 0;
}
