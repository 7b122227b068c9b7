--- cupola.help: the API in one screen, and a page per topic.
--   cupola.help()          -> the overview: one line per function, by section
--   cupola.help "pool"     -> one topic in more detail (also a function or a
--                             handle: cupola.help(cupola.pool), cupola.help(s))
-- It returns the text and never prints (the library does not print); the
-- REPL shows what it returns, and bin/cupola's REPL also has help(), which
-- prints.  docs/API.md is the full reference; this is its summary, section
-- by section in the same order.
local core = require "cupola.core"
local util = require "cupola.util"
local raise, shown = util.raise, util.shown

local help = {}

-- Each topic is one section of docs/API.md (`section`, its heading there):
-- the names that lead to it (keys of cupola or of its tables, methods,
-- handle type names, kinds, variables), its lines in the overview, and its
-- page.  spec/help_spec.lua holds them to the reference: every section has
-- its topic, and each page mentions what its section documents.
help.topics = {
  {
    name = "basics",
    section = "Conventions",
    names = { "conventions", "sizes", "handles", "errors", "out_of_memory" },
    overview = {
      { "cupola.bytes(size) -> integer", "sizes: 4096, \"64KiB\", \"4MiB\", ..." },
      { "nil, msg, \"out_of_memory\", info", "out of memory is data; misuse raises" },
    },
    page = [[
Conventions.  Sizes are integer bytes or strings with binary units: "256B",
"64KiB", "4MiB", "1.5GiB" (cupola.bytes turns one into an integer).
Negative, fractional or malformed sizes raise an argument error.
Handles (Stream, Event, Buffer, Mempool, Pool, Trace, ...) have __name
"cupola.X", __tostring, __gc and __close: `local b <close> = pool:alloc("1MiB")`
frees at the end of the scope.  close() is safe twice; using a closed handle
raises "attempt to use a closed cupola.X".  A buffer keeps its stream and pool
alive; finalizers never raise and never wait for the device.
Errors: misuse raises an error naming the argument or option and the value it
got, at your script's line ("x.lua:3: bad argument #1 to 'malloc' (size must
not be negative, got -1)").  Device failures raise with CUDA's error name.
Out of memory is data: nil, message, "out_of_memory", info, the allocator left
as it was; info = {requested, kind, free, largest_free, fragmentation,
reserved, used, device_free, device_total} (what applies).
Streams as arguments: optional everywhere; the default is
cupola.default_stream, or the buffer's own stream (b.stream).]],
  },
  {
    name = "device",
    section = "Backend and device",
    names = { "backend", "device", "synchronize", "mem_info", "clock", "bytes", "version" },
    overview = {
      { "cupola.backend() -> \"cuda\" | \"host\"", "CUPOLA_BACKEND=host|cuda forces one" },
      { "cupola.device() -> {name, memory, sms, cc, ...}", "the device in use" },
      { "cupola.synchronize()  .mem_info()  .clock()", "wait for all; free, total; seconds" },
    },
    page = [[
cupola.backend() -> "cuda" or "host".  CUDA when a usable device exists,
  else the host backend (device memory from the OS, streams run by worker
  threads, kernels on the CPU).  CUPOLA_BACKEND=host|cuda forces one; cuda
  without a device makes require "cupola" fail.
cupola.device() -> table: name, index, memory (bytes), sms, cc ("9.0"),
  mempools (bool), driver, runtime (versions, 0 on host), priority_least,
  priority_greatest (the stream priority range), backend.
cupola.synchronize(): waits for all work; also frees collected malloc buffers.
cupola.mem_info() -> free, total: the device's memory in bytes.
cupola.bytes(size) -> integer: a size ("4MiB") in bytes.
cupola.clock() -> seconds on the monotonic clock (host-side timing).
cupola.version: this library's version string.]],
  },
  {
    name = "stream",
    section = "Streams",
    names = { "stream", "default_stream", "cupola.Stream" },
    overview = {
      { "cupola.stream{priority=0, blocking=false}", "-> Stream; cupola.default_stream" },
      { "s:synchronize()  s:query()  s:wait(event)", "Stream methods; s.id, s.closed" },
    },
    page = [[
cupola.stream{priority=0, blocking=false} -> Stream.  Lower priority numbers
  are more urgent (device().priority_greatest..priority_least).  blocking=true
  makes it synchronize with the legacy default stream.
cupola.default_stream: the legacy default stream (never closed).
s:synchronize()        waits for the work queued on s
s:query() -> boolean   true when s has nothing left to run
s:wait(event) -> s     later work on s waits for event (cudaStreamWaitEvent)
s:close()              releases it once the buffers ordered on it are freed
Fields: s.id (integer, 0 for the default stream), s.default, s.closed.]],
  },
  {
    name = "event",
    section = "Events",
    names = { "event", "cupola.Event" },
    overview = {
      { "cupola.event{timing=true} -> Event", "a marker in a stream" },
      { "e:record(s)  e:query()  e:synchronize()", "Event methods; e:elapsed(e2) -> ms" },
    },
    page = [[
cupola.event{timing=true} -> Event.
e:record(s) -> e          marks the point reached by the work queued on s
e:synchronize()           waits until that point is reached
e:query() -> boolean      true once it is reached
e:elapsed(later) -> ms    time from e to later; both need timing=true
e:close()
Streams wait on each other through events: e:record(s1); s2:wait(e).]],
  },
  {
    name = "malloc",
    section = "CUDA's allocation paths",
    names = { "malloc", "malloc_async" },
    overview = {
      { "cupola.malloc(size)  .malloc_async(size, s)", "-> Buffer: cudaMalloc, cudaMallocAsync" },
    },
    page = [[
cupola.malloc(size) -> Buffer | nil, msg, "out_of_memory", info
  cudaMalloc.  b:free() is cudaFree, which synchronizes the device.  A
  collected malloc buffer is freed at the next cupola.malloc, explicit free of
  a malloc buffer or cupola.synchronize() (finalizers never synchronize).
cupola.malloc_async(size, s) -> Buffer | nil, msg, "out_of_memory", info
  cudaMallocAsync on s (default stream if absent) from the current mempool;
  b:free(s2) is cudaFreeAsync on s2, by default on b.stream.]],
  },
  {
    name = "mempool",
    section = "Native pools (Mempool)",
    names = { "mempool", "cupola.Mempool", "set_current", "current", "default", "reset_high" },
    overview = {
      { "cupola.mempool{location=, max_size=, ...}", "-> Mempool; .default() .current()" },
      { "p:alloc(size, s)  p:trim(keep)  p.used_high", "Mempool methods; attributes are fields" },
    },
    page = [[
cupola.mempool{location="device"|"host", max_size=0, release_threshold=,
  handle="none"|"posix_fd", reuse_follow_event_dependencies=,
  reuse_allow_opportunistic=, reuse_allow_internal_dependencies=} -> Mempool
  (cudaMemPoolCreate; max_size 0: no limit).  cupola.mempool.new{...} too.
cupola.mempool.default()  the device's default pool (cannot be closed)
cupola.mempool.current()  the pool cupola.malloc_async serves from
cupola.mempool.set_current(p)   cudaDeviceSetMemPool
p:alloc(size, s) -> Buffer | nil, msg, "out_of_memory"   (MallocFromPoolAsync)
p:trim(keep=0)   gives reserved memory back down to keep bytes
p:reset_high()   resets reserved_high and used_high
p:stats() -> every attribute, and live_buffers
p:set_access(dev, "rw"|"r"|"none")  p:access(dev) -> mode  (other devices)
p:export() -> text   (handle="posix_fd" pools; see cupola.help "devices")
p:close()        raises while buffers are live
Read/write fields: release_threshold (size), reuse_follow_event_dependencies,
reuse_allow_opportunistic, reuse_allow_internal_dependencies (booleans).
Read-only: reserved_current, reserved_high, used_current, used_high; closed.]],
  },
  {
    name = "pool",
    section = "Pools written in C (Pool)",
    names = { "pool", "cupola.Pool", "arena", "freelist", "tlsf", "caching", "pool_kinds" },
    overview = {
      { "cupola.pool{kind=\"tlsf\", upstream=\"device\", ...}", "-> Pool: allocators written in C" },
      { "p:alloc(size, s)  p:trim(keep)  p:stats()", "Pool methods; p.kind, p.upstream" },
    },
    page = [[
cupola.pool{...} -> Pool | nil, msg, "out_of_memory" (initial not available)
  kind      "tlsf" (default) | "freelist" | "caching" | "arena"; and "vmm",
            "torch", "cub", "bfc", "cupy", "plugin": each has its own topic
  upstream  "device" (default) | "async" | "managed" | "pinned" | "virtual"
            (addresses only, no memory: for replaying traces)
  initial=0 bytes reserved at creation   grow=true may reserve more
  max=0 (none) limit on reserved         alignment=256 (a power of two)
  release_threshold=0 idle bytes kept    reuse="event" | "stream" | "wait"
  fallback=false serve from the upstream what the pool cannot
  limit=size refuse allocations past it  log=path RMM CSV of every call
  clock="wall" | "manual" (seconds since made; manual: set by the script)
cupola.pool_kinds() -> every kind (also by name): its options (name, type,
  default) and traits: own_clock, recorded_addresses, keeps_idle, spec
p:alloc(size, s) -> Buffer | nil, msg, "out_of_memory"; b:free(s) gives it back
p:alloc_raw(size, s) -> address, p:free_raw(a, s), p:buffer(a): help "raw"
p:trim(keep=0)    returns free chunks to the upstream
p:reset()         arena only: frees every block (its buffers become closed)
p:empty_cache()  p:settings()   torch only: help "torch"
p:free_all_blocks() -> bytes   cupy only: help "cupy"
p:stats() -> used, used_peak, reserved, reserved_peak, allocs, frees, failed,
  largest_free, free_bytes, fragmentation, live_buffers, live_raw,
  device_allocs, device_frees; vmm, cub, torch and bfc add their own
p:time() -> s     the pool's clock; p:set_time(t), p:advance(dt): manual only
p:close() -> n    raises while buffers are live; n: raw blocks freed with it
Fields: p.kind, p.upstream, p.reuse, p.alignment, p.device, p.clock, p.closed.]],
  },
  {
    name = "raw",
    section = "Raw blocks: `p:alloc_raw`, `p:free_raw`, `p:buffer`",
    names = { "alloc_raw", "free_raw", "buffer" },
    overview = {
      { "p:alloc_raw(size, s) -> a  p:free_raw(a, s)", "raw blocks: no Buffer; p:buffer(a)" },
    },
    page = [[
p:alloc_raw(size, s) -> address (an integer) | nil, msg, "out_of_memory": the
  same block of the same pool without a Buffer (a pair costs the pool's work
  and two calls).  Ordered on s, the stream it was allocated on.
p:free_raw(a, s) frees it, on its own stream by default; the pool's reuse
  policy applies as after b:free(s).  The pool checks every address against
  its map: a double free, an address inside a block, one it never gave or one
  a Buffer owns raises, naming the address.
p:buffer(a) -> Buffer  takes the block over (its free gives it back;
  free_raw(a) then raises): for built-in kernels, copies, read/write.
Kernels of one's own take the address as a "ptr" argument.
Raw blocks live at p:close() are freed with the pool; close returns how many.
stats().live_raw counts them.]],
  },
  {
    name = "vmm",
    section = "The vmm pool (`kind = \"vmm\"`)",
    names = { "vmm", "set_time", "advance", "time" },
    overview = {
      { "cupola.pool{kind=\"vmm\"}", "pages mapped only under live blocks" },
    },
    page = [[
cupola.pool{kind="vmm", upstream="device"|"virtual", release_threshold=,
  initial=, max=, clock="wall"|"manual"}: a pool over CUDA's virtual memory
  management.  Blocks are placed in a reserved address range; physical pages
  (the device's granularity, 2 MiB) are mapped only under live blocks, so
  reserved is the mapped bytes.  Idle pages stay mapped where they are and
  are moved or released when needed.
By default it decides by time, on its clock: moves and releases are paid
  from a budget of 1/32 of the clock's time; the recent peak of demand (plus
  1/64) stays mapped; a page idle for a window is released.  With
  release_threshold (0 included): that many idle bytes kept, no clock.
p:trim(keep) releases idle pages; p:time(), p:set_time(t), p:advance(dt).
stats() adds page_bytes, pages_mapped, maps, unmaps (and by time:
  recent_peak, decay_window, map_budget).  A replay with {clock="trace"}
  reports maps and unmaps on the trace's own clock.
For backend implementers: backend.h's vm_* operations.]],
  },
  {
    name = "torch",
    section = "PyTorch's allocator (`kind = \"torch\"`)",
    names = { "torch", "empty_cache", "settings", "PYTORCH_CUDA_ALLOC_CONF" },
    overview = {
      { "cupola.pool{kind=\"torch\", conf=\"...\"}", "PyTorch 2.11's allocator, exactly" },
    },
    page = [[
cupola.pool{kind="torch", conf="expandable_segments:True,...",
  upstream="virtual"|"device", max=, device_memory=,
  address_model="driver"|"bump"}: PyTorch 2.11's CUDA caching allocator,
  modelled rule for rule; conf in PYTORCH_CUDA_ALLOC_CONF syntax ("" is
  PyTorch's defaults).  max is PyTorch's allowed maximum
  (set_per_process_memory_fraction).
p:empty_cache()   torch.cuda.empty_cache()
p:settings() -> PyTorch's allocator_settings, plus conf, limit, ...
p.conf            the conf string as given
stats() adds torch.cuda.memory_stats()'s names ("allocated_bytes.all.peak",
  "reserved_bytes.large_pool.current", num_alloc_retries, num_ooms,
  num_device_alloc, ...).
A snapshot replayed with {addresses="recorded"} gives PyTorch's own figures;
  t.torch_conf is the conf that recorded it; {stop_at_oom=true} stops where
  PyTorch would have raised OutOfMemoryError (r.stopped).]],
  },
  {
    name = "cub",
    section = "CUB's allocator (`kind = \"cub\"`)",
    names = { "cub", "bin_growth", "max_cached_bytes" },
    overview = {
      { "cupola.pool{kind=\"cub\", bin_growth=8, ...}", "CUB's CachingDeviceAllocator, exactly" },
    },
    page = [[
cupola.pool{kind="cub", bin_growth=8, min_bin=3, max_bin=7,
  max_cached_bytes=6291455, upstream=, reuse=, max=}: CUB's
  CachingDeviceAllocator rule for rule (CUB's defaults; no initial): geometric
  bins, exact sizes above the largest, oldest cached block of the bin first,
  another stream's block once its ready event has completed, the cache
  bounded by max_cached_bytes, the whole cache freed and the allocation
  retried when the upstream refuses.
stats() adds device_alloc_failures, retries, cached_bytes, cached_blocks,
  live_bytes (device_allocs, device_frees: CUB's cudaMalloc/cudaFree calls).]],
  },
  {
    name = "bfc",
    section = "XLA's BFC allocator (`kind = \"bfc\"`) and JAX profiles",
    names = { "bfc", "jax", "memory_limit", "allow_growth", "jax_memory", "xplane" },
    overview = {
      { "cupola.pool{kind=\"bfc\", memory_limit=, ...}", "XLA's BFC allocator (JAX), exactly" },
    },
    page = [[
cupola.pool{kind="bfc", memory_limit=B, allow_growth=false,
  garbage_collection=false, fragmentation_fraction=0, spatial_partitioning=,
  upstream=}: XLA's
  best-fit-with-coalescing allocator as JAX's GPU client sets it up: 256-byte
  chunks, 21 bins, best fit by size then address, split at twice the
  request or a remainder of 128 MiB, coalescing, regions of 2 MiB doubling
  with allow_growth (JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false), else the whole
  limit at the first allocation; memory_limit is required over "virtual"
  (JAX: device memory x XLA_CLIENT_MEM_FRACTION, 0.75 by default).
stats() adds num_allocs, bytes_in_use, peak_bytes_in_use, pool_bytes,
  peak_pool_bytes, largest_alloc_size, largest_free_block_bytes, bytes_limit,
  regions, region_frees.
cupola.trace.load reads JAX's memory events (format "jax_memory"): the
  profile jax.profiler.trace writes (*.xplane.pb or its directory) or JSON
  lines of its MemoryAllocation/MemoryDeallocation events, gzip or not;
  {allocator="GPU_1_bfc"} picks one (default: the first GPU_<n>_bfc).
  Replayed with {addresses="recorded"}: BFC's own figures, to the byte
  (r.address_mismatches, r.chunk_mismatches: allocations unlike JAX's).
cupola.advise on a JAX profile: growth against preallocated, the least
  memory, XLA_CLIENT_MEM_FRACTION of {device_memory=} (--device-memory).]],
  },
  {
    name = "cupy",
    section = "CuPy's memory pool (`kind = \"cupy\"`)",
    names = { "cupy", "free_all_blocks", "cupy_hook", "DebugPrintHook", "set_limit" },
    overview = {
      { "cupola.pool{kind=\"cupy\", max=}", "CuPy 14.2's MemoryPool, exactly" },
    },
    page = [[
cupola.pool{kind="cupy", upstream="virtual"|"device", max=}: CuPy 14.1-14.2's
  MemoryPool rule for rule: 512-byte rounding, an arena per stream, the
  smallest free chunk that fits split always, merged back with free
  neighbours (never across cudaMalloc blocks); at the limit (max, CuPy's
  set_limit) or a refused cudaMalloc: free_all_blocks and a retry, then a
  gc.collect() round, then out of memory.  Equal free chunks: lowest address
  (CuPy: a Python object's address); addresses="recorded" follows the log.
p:free_all_blocks() -> bytes given back (whole free blocks only)
p:stats() adds used_bytes, total_bytes, free_bytes, n_free_blocks,
  device_alloc_failures, free_all_blocks_calls, gc_rounds, ooms, tie_choices.
cupola.trace.load reads DebugPrintHook's JSON lines (t.format "cupy_hook",
  gzip or not), plus the keys stream, total_bytes and the lines
  malloc_preprocess and free_all_blocks (arena_stream) a recording hook adds;
  t.cupy: device_allocs, gc_frees, peak_total_bytes, ...
cupola.trace.replay(t, cupola.pool{kind="cupy", upstream="virtual", max=L},
  {addresses="recorded", stop_at_oom=true}) -> r.peak_reserved (peak
  total_bytes), r.device_allocs, r.stopped.line, r.cupy.exact,
  r.cupy.mismatch, r.cupy.divergence.  Shipped: "cupy/fft.unlimited", ...
  (examples/traces/cupy); bench/cupy_check.lua checks recordings.]],
  },
  {
    name = "plugin",
    section = "Your own allocator (`kind = \"plugin\"`)",
    names = { "plugin", "conformance", "is_conforming_pool", "include_dir", "allocator.h" },
    overview = {
      { "cupola.pool{kind=\"plugin\", source=C, symbol=}", "your allocator: <cupola/allocator.h>" },
      { "cupola.conformance(make_pool, opts) -> report", "the battery; busted: is_conforming_pool" },
    },
    page = [[
cupola.pool{kind="plugin", path="libmine.so" | source=C_SOURCE,
  symbol="mine_allocator", options="..."} -> Pool: an allocator written in C
  against <cupola/allocator.h> (cupola.include_dir): version, create,
  destroy, allocate, deallocate, and optionally flags, stats.  source= is
  compiled by the system C compiler and cached.  It gets every common option,
  cupola's stream order, stats, adaptors, replay; each block it returns is
  checked (inside its upstream memory, no overlap) and aligned for it.
The conformance battery cupola's own allocators pass:
  cupola.conformance(make_pool, opts) -> {ok=, violations=, ops=,
  reproducer=, skipped=, checks=}; make_pool(o) gets o.reuse, o.initial,
  o.max; opts: ops=300, seed=1, checks={...}, max_live, small, large,
  no_data, nonblocking, shrink_runs.  In a busted spec: require
  "cupola.busted"; assert.is_conforming_pool(make_pool, opts) fails with
  the first violation and a shrunk Lua reproducer.]],
  },
  {
    name = "buffer",
    section = "Buffers",
    names = { "cupola.Buffer" },
    overview = {
      { "b.size  b.address  b.stream  b.pool  b.origin", "Buffer fields (also b.freed, #b)" },
      { "b:free(s)  b:read(off, len, s)  b:write(str, off)", "b:memset(byte, s)  b:copy_to(dst, s)" },
    },
    page = [[
Every allocator returns a Buffer.
Fields: size, address (integer), stream (the Stream it is ordered on), pool
  (its Mempool or Pool, nil for malloc), origin ("malloc", "malloc_async",
  "mempool", "pool"), freed.  #b == b.size.  Fields are read-only.
b:free(s)                  stream-ordered free on s (default b.stream);
                           a second free raises "double free"
b:close()                  the same free, but safe twice
b:write(str, offset=0, s) -> b       copies str into the buffer
b:read(offset=0, len=rest, s) -> str  the bytes after the work queued on s
b:memset(byte, s) -> b     every byte set (0..255)
b:copy_to(dst, s) -> dst   all of b into the start of dst (across devices too)
b:export() -> text         for cupola.buffer.import in another process
Buffers of a "virtual" pool have no memory: read, write, memset, copy_to and
kernels raise.  A buffer keeps its stream and pool alive.]],
  },
  {
    name = "kernels",
    section = "Built-in kernels",
    names = { "kernels", "fill", "sqrt_index", "checksum", "spin", "pattern", "verify" },
    overview = {
      { "cupola.kernels.fill(b, value, {type=\"f32\"})", "every element = value; .sqrt_index(b)" },
      { "cupola.kernels.checksum(b, {type=}) -> number", "sum of the elements (waits)" },
      { "cupola.kernels.spin(us)  .pattern(b, seed)", ".verify(b, seed): bytes that differ" },
    },
    page = [[
Built-in kernels; each runs on opts.stream, else b.stream, and takes the
launch options grid= and block= (1..1024); defaults cover the buffer.
kernels.fill(b, value, {type=, stream=, grid=, block=}) -> b
  type "f32" (default) | "f64" | "i32" | "u32" | "u8"; integer types need an
  integer value in their range.
kernels.sqrt_index(b, {stream=, grid=, block=}) -> b: data[i] = sqrtf(i), f32
kernels.checksum(b, {type=, stream=, grid=, block=}) -> sum of the elements
  (integer for integer types); waits for the stream.
kernels.spin(microseconds, {stream=})  busy for 0..60000000 us; returns at once
kernels.pattern(b, seed, {stream=}) -> b   bytes from seed and offset
kernels.verify(b, seed, {stream=}) -> count of bytes that differ (waits)
Kernels of your own: cupola.help "module".]],
  },
  {
    name = "module",
    section = "Kernels of your own",
    names = { "module", "module_cache_stats", "module_cache_forget", "cupola.Module", "cupola.Kernel", "kernel",
      "launch", "registers" },
    overview = {
      { "cupola.module{source=, name=, options=}", "-> Module: your CUDA C, compiled" },
      { "m:kernel(name, types)  k:launch(opts, ...)", "declare, then launch on a stream" },
    },
    page = [[
cupola.module{source=SRC | path="k.cu" | ptx=PTX | cubin="k.cubin", name=,
  options={"-DN=4", "-rdc=true", ...}} -> Module.  NVRTC on the CUDA backend;
  the system C++ compiler and cupola's CPU prelude on the host backend (the
  same source runs on both).  <cupola/device.h> is on the include path.  A
  compile error raises with the compiler's log (name:line: message).
  Compiled code is cached by content (memory, and $XDG_CACHE_HOME/cupola).
m:kernel(name, types) -> Kernel: an extern "C" __global__ function and its
  parameter types: "ptr" (Buffer or address), "i32" "u32" "i64" "u64" "f32"
  "f64", "device_pool".
k:launch({grid=, block=, shared=0, stream=} | {threads=N, block=256}, ...)
  enqueues and returns; arguments are checked (count, type, range, closed).
k:registers() -> registers per thread of the compiled kernel (nil on the host).
m:close()  k:close()   a kernel keeps its module loaded until it is closed.
Fields: m.name, m.cached (the compile was a cache hit), m.code, m.log.
cupola.module_cache_stats() -> {memory_hits=, disk_hits=, misses=, ...}
cupola.module_cache_forget() empties the in-memory cache.
For C code: src/core/kernel/compile.h (cp_cc_shared_object, the caches).]],
  },
  {
    name = "faults",
    section = "Faults in kernels, sticky CUDA errors, fork()",
    names = { "fault", "sticky", "fork" },
    overview = {
      { "a kernel that faults; sticky CUDA errors; fork()", "reported, never a crash or a hang" },
    },
    page = [[
Faults in kernels: on the host backend a kernel's hardware fault (a bad store,
  a null dereference, integer division by zero, a stack overflow, __trap())
  does not kill the process: the next synchronization of its stream raises
  naming the kernel (cudaErrorIllegalAddress: ...), the stream stays in error
  (close it, use a new one), other streams live on.
Sticky CUDA errors: on a GPU an illegal address (and the like) leaves the
  CUDA context unusable; cupola says so where it first shows and then
  refuses every call that touches the device with the same message.
fork(): in a child process created after cupola started, every call that
  would block on a worker thread or touch the device raises at once; exec a
  new program to use cupola in a child.]],
  },
  {
    name = "dpool",
    section = "Allocation inside kernels (device pools)",
    names = { "device_pool", "run_concurrent", "cupola.DevicePool", "run", "heap", "slab", "bump", "warp_bump",
      "device.h" },
    overview = {
      { "cupola.device_pool{kind=, capacity=}", "-> DevicePool: allocation in kernels" },
      { "dp:run{threads=, bytes=, free=}", "-> {ok=, failed=, overlaps=, ms=}" },
    },
    page = [[
cupola.device_pool{kind="bump"|"warp_bump"|"slab"|"malloc"|"heap", capacity=} ->
  DevicePool: an allocator that runs inside kernels (malloc: CUDA's own; heap:
  16 B up to the pool, free from any thread, no reset needed).
cupola.device_pool{kind="plugin", source=SRC | path="mine.cu", capacity=,
  name=, options=, init_threads=1024, include={DIR}, compiler="nvrtc"|"nvcc"}:
  your own allocator (cupola/plugin.h: cupola_plugin_init/alloc/free), run
  and checked as cupola's pools are; one that defines cupola_plugin_create/
  destroy is made on the host (a peer's adapter: bench/peers/, from your
  checkout on include=, compiler="nvcc"; sh bench/device_peers.sh).
dp:run(opts) with opts = {threads=N, bytes=B or {min, max}, stream=,
  free=false, block=256, verify=true, reset=, hold_us=, seed=, children=}
  (written dp:run{...}) -> {ok=, failed=, overlaps=, misaligned=, threads=,
  ms=, per_second=}: threads allocate, write their block, optionally free; a
  verification kernel counts overlaps.
cupola.run_concurrent{ {pool=dp, <run options>, wait=ev, record=ev}, ... }
  -> results: several runs in flight at once (two streams racing on one pool).
dp:reset(s)   dp:stats() -> {capacity, used, peak, failed, kind}   dp:close()
In your kernels: #include <cupola/device.h>; cupola_alloc(pool, bytes) (NULL
  when exhausted) and cupola_free(pool, ptr) on a "device_pool" parameter;
  also from child kernels (CUDA backend).  The survey: cupola.help "survey".]],
  },
  {
    name = "survey",
    section = "The survey of in-kernel allocators (`cupola.survey`)",
    names = { "survey", "cupola.survey" },
    overview = {
      { "require(\"cupola.survey\").run{allocators=}", "the survey's benchmarks, device pools" },
    },
    page = [[
local survey = require "cupola.survey"
survey.run{allocators={"heap", "slab", "malloc", {kind="plugin", path=}},
  tests={"init", "registers", "thread", "warp", "mixed", "scaling", "pairs",
  "frag", "oom", "synth", "synth_write"}, capacity=, iterations=,
  budget_ms=, progress=fn} -> {meta = {...}, rows = {...}}: the benchmarks of
  Winter et al. (PPoPP 2021) on any device pool and CUDA's in-kernel malloc,
  every allocation, write and check in kernels, timed with events.
survey.csv(res, path), survey.json(res, path), survey.html(res, path) (one
  page of plots, no network), survey.markdown(res) -> text.]],
  },
  {
    name = "devices",
    section = "Several GPUs and several processes",
    names = { "device_count", "set_device", "current_device", "can_access_peer", "enable_peer_access",
      "import", "export", "set_access", "access", "CUPOLA_HOST_DEVICES" },
    overview = {
      { "cupola.device_count()  cupola.set_device(i)", "several GPUs; device= options; peers" },
      { "mp:export()  cupola.mempool.import(text)", "IPC; b:export(), cupola.buffer.import" },
    },
    page = [[
cupola.device_count() -> n; cupola.device(i) (0-based, default the current);
cupola.set_device(i) / cupola.current_device(): the device of object-less calls.
device=i on cupola.stream{}, cupola.mempool{}, cupola.pool{} and
  cupola.malloc(size, {device=i}); cupola.mem_info(i), cupola.synchronize(i).
  Streams, pools and buffers have a .device field; work on an object runs on
  its device whatever the current one is.
cupola.can_access_peer(i, j) -> bool; cupola.enable_peer_access(i, j)
  (twice is fine; i == j raises).  b:copy_to(dst, s) copies across devices.
mp:set_access(j, "rw"|"r"|"none"), mp:access(j) -> mode: other devices'
  access to a native pool's memory (cudaMemPoolSetAccess).
IPC: mp:export() -> text (a pool created with handle="posix_fd");
  cupola.mempool.import(text) in another process; b:export() -> text;
  cupola.buffer.import(pool, text) (pool buffers) or cupola.buffer.import(text)
  (cupola.malloc buffers, CUDA's legacy IPC).  Exports start "cupola-ipc/1"
  and are checked before use.  CUPOLA_HOST_DEVICES=N emulates N devices on
  the host backend.]],
  },
  {
    name = "trace",
    section = "Traces",
    names = { "trace", "find", "load", "replay", "compare", "cupola.Trace" },
    overview = {
      { "cupola.trace.load(path or name) -> Trace", "RMM CSV, PyTorch, JAX, CuPy, record" },
      { "cupola.trace.replay(t, pool)  .compare(t, cfgs)", "replayed in C; one row per pool config" },
    },
    page = [[
cupola.trace.find(name) -> path | nil, msg: "gpt2_train", "gpt2_train.csv.gz"
  looked up in $CUPOLA_TRACES, beside the installed module, examples/traces.
cupola.trace.load(path) -> Trace: RMM logging-adaptor CSV
  (Thread,Time,Action,Pointer,Size,Stream), a PyTorch memory snapshot
  (torch.cuda.memory._dump_snapshot's pickle, read in C), plain or gzip; or
  the name of a trace cupola ships ("gpt2_train").  Malformed input raises
  "path:line: reason".
cupola.trace.replay(t, pool, {single_stream=false, repeat=1,
  synchronize=true, clock="pool"|"trace", stop_at_oom=false, record=false,
  progress=true, addresses="model"|"recorded", idle_streams=false})
  -> {events, ns_per_event, seconds, peak_live, peak_reserved,
  reserved_over_live, failed,
  skipped_frees, complete, warning, reserved_byte_seconds, live_byte_seconds,
  maps, unmaps, peak_allocated, device_allocs, device_frees, retries, ooms,
  torch_peak_reserved, torch_reserved_over_live, recording, ...}
  complete=false (and a warning) when the pool refused allocations.
cupola.trace.compare(t, configs, opts) -> rows: configs are tables for
  cupola.pool (plus name=); each row is replay's table plus kind, upstream, name.
Trace: #t events; fields events, allocs, frees, streams, threads, leaked,
  peak_live, total_bytes, max_size, duration_us, path, format, devices,
  torch_peak_reserved, torch_conf, cut, warning (a cupola_record file);
  t:info() -> all of them;
  t:event(i) -> {action, pointer, size, stream, thread, time_us, label,
  python_frame, stack};
  t:replay(pool, opts); t:close().]],
  },
  {
    name = "record",
    section = "Recording any CUDA program: `bin/cupola record`",
    names = { "record", "cupti", "injection" },
    overview = {
      { "bin/cupola record [-o FILE] -- COMMAND", "a program's CUDA allocations as a trace" },
    },
    page = [[
bin/cupola record [-o FILE] [--flush-ms N] -- COMMAND...: runs COMMAND with
  CUDA_INJECTION64_PATH set to build/libcupola_record.so (make record; CUPTI's
  callbacks on the allocation calls), so every allocation and free of the
  program and its children is written as it happens; prints the device
  allocations, the peak and the file(s); exits with the command's status.
  No command: usage, status 2.  Host backend, library or CUPTI missing: one
  line, status 1.
Files: one per process and device, FILE's stem + .pPID.dDEV + extension
  (gzip when FILE ends in .gz); a lone file is renamed to FILE.  Flushed every
  N ms (CUPOLA_RECORD_FLUSH_MS, default 50): a killed program keeps what is
  older; "# end" is the last line of a whole file.
Format "cupola_record": # cupola record 1: pid, device, start_unix_ns ...;
  Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call (the first six
  are RMM's).  Kinds device, managed, pinned, vmm: only device memory becomes
  rows; the rest, failures included, counts in t.ignored.  A cut file loads
  what is whole: t.cut, t.warning.
What is recorded, and what is not: cudaMalloc*, cudaFree*, cudaMallocAsync /
  FreeAsync (stream), cudaMallocFromPoolAsync (pool), cuMemAlloc*, cuMemCreate /
  Release / Map / Unmap; not in-kernel malloc, arrays, cudaHostRegister, a
  native pool's reserved memory, graph memory nodes.
A program that uses CUPTI itself (a profiler started later) gets
  CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: one line says so, from
  libcupola_record_preload.so, which the launcher puts in LD_PRELOAD; a tool
  holding CUPTI first (Nsight, compute-sanitizer) leaves the process
  unrecorded, said in one line.
The request-level stream of a framework that caches: record with
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 (replay kind "torch"),
  XLA_PYTHON_CLIENT_ALLOCATOR=platform (kind "bfc"), or
  cupy.cuda.set_allocator(None) (kind "cupy"); compare with max_memory_reserved,
  memory_stats(), total_bytes() of a run with caching on; file format and
  files per process and device in docs/API.md.
Variables: CUPOLA_RECORD_OUT, CUPOLA_RECORD_LIST, CUPOLA_RECORD_FLUSH_MS,
  CUPOLA_RECORD_LIB, CUPOLA_RECORD_LEVEL=runtime (the runtime's callbacks too).
  Diagnoses, costly: CUPOLA_RECORD_CENSUS=1 (every driver and runtime call
  counted, "# census" notes), CUPOLA_RECORD_CALLERS=1 (who called, in Call).]],
  },
  {
    name = "advise",
    section = "Advice for PyTorch users: `cupola.advise`",
    names = { "advise", "pytorch" },
    overview = {
      { "cupola.advise(snapshot, {limit=}) -> result", "the PYTORCH_CUDA_ALLOC_CONF to use" },
    },
    page = [[
cupola.advise(trace_or_path [, {limit=, conf={...}, recorded=, pools={...},
  search=, threads=, device=, progress=}]) -> {rows, recommended, paste,
  warnings, notes, ...}: a PyTorch snapshot (torch.cuda.memory._dump_snapshot,
  either pickle writer, plain or gzip; or an RMM log) replayed through the
  model of PyTorch's allocator under a grid of settings (the recorded one,
  defaults, expandable_segments, max_split_size_mb from its own request
  sizes, roundup_power2_divisions 1..16, garbage_collection_threshold under
  a limit, the best combined, yours) and through cupola's pools (tlsf, vmm,
  caching: the pluggable allocator), in C threads.  Each row: setting,
  kind, peak_reserved, overhead, device_allocs, retries, change_pct;
  with limit: fits, fails_at (with the frames: label, python_frame,
  stack), min_memory (the least memory it runs in).  limit: bytes or
  "24GiB", "24G" (2^30 a GiB), "24GB" (10^9 a GB).
  res.paste: the line to run, PYTORCH_CUDA_ALLOC_CONF=... python train.py;
  res.paste_note: what else it needs, where something does.
A CuPy memory-hook log (help "cupy"): CuPy's MemoryPool replayed, the
  least set_limit that runs it (res.least_limit; paste: CUPY_GPU_MEMORY_LIMIT=N
  under a limit, none without), res.peak_used_bytes, res.free_all_blocks_at_peak,
  and cupola's pools beside it (CUPOLA_CUPY_POOL).
bin/cupola advise SNAPSHOT [--limit 24GiB] [--conf C]... [--device-memory SIZE]
  [--brief] [--json] [--html P] prints the same, the answer first, in the
  terminal's width (--brief: the answer and the table only; --device-memory:
  the device's size, of which PyTorch's and JAX's fractions are; bin/cupola
  advise --help).]],
  },
  {
    name = "scale",
    section = "Predicting a run not yet made (batch, sequence length)",
    names = { "scale", "predict", "largest", "at" },
    overview = {
      { "cupola.trace.scale({[4]=a, [8]=b}, 32) -> Trace", "the program at a size not recorded" },
    },
    page = [[
cupola.trace.scale(recordings, at) -> Trace: recordings maps each size (the
  batch, the sequence length, the image side: a positive integer) to a Trace
  or a path of one program's recording at it, two or more; at, the size to
  predict.  The result replays, advises and draws like any trace; t.scaled =
  {from, at, base, matched, by_rule, by_rule_bytes, left_out, fits =
  {constant, linear, square, cube, affine, polynomial}, steeper,
  steeper_bytes, note}.  It keeps the events of the recording nearest at
  (base), in order, on their streams, with their frames; each allocation is
  found in the others by stack (C++ frames too), stream and device, by
  position among those without frames; its size fitted: a law from two
  recordings (held, the size, its square, its cube) else a line; from three,
  a law, else the lowest degree that gives each to 512 bytes.  One found in
  no other recording keeps its size (by_rule).  It keeps the base's device
  calls (addresses="recorded" follows them while the model's are the same).
  Refused with a sentence: one recording, two of one size, two programs
  (where they first differ), two settings.
bin/cupola advise A@4 B@8 --at 32 [--limit L] [--json]: the advice at 32,
  the recorded setting's row the prediction for it (prediction "scaled");
  the JSON's predicted = {from, at, matched, by_rule, by_rule_bytes}.
  --limit L without --at: each row's largest (the largest size from 1 up
  whose prediction fits in L), largest_setting, the advice at that size.]],
  },
  {
    name = "timeline",
    section = "Timelines and NVTX ranges",
    names = { "timeline", "nvtx", "push", "pop", "range", "mark", "depth", "CUPOLA_NVTX" },
    overview = {
      { "cupola.timeline(src, path) -> path, info", "one HTML page: live/reserved, blocks" },
      { "cupola.nvtx.push(name)  .pop()  .range(name, fn)", "NVTX ranges; CUPOLA_NVTX=1: cupola's" },
    },
    page = [[
cupola.timeline(src, path [, opts]) -> path, info: one self-contained HTML
  file (no network) drawing bytes live and reserved over time and the blocks
  as bands by address, peak marked, hover for size/stream/time; zoom refines
  (big traces stay usable).  src: a Trace or a trace's path (CSV or PyTorch
  snapshot pickle), a replay result made with {record=true}, a list of them,
  {pools={...}} (several allocators side by side) or {log=path}.
  info = {panels, events, blocks, bytes}.  An incomplete replay's panel
  carries its warning.
cupola.nvtx.push(name), cupola.nvtx.pop(), cupola.nvtx.mark(name),
  cupola.nvtx.range(name, fn, ...) -> fn's results (closed even on error),
  cupola.nvtx.depth() -> open ranges.  NVTX v3; a no-op without CUDA.
  CUPOLA_NVTX=1: pool operations and launches are ranges in domain "cupola".]],
  },
  {
    name = "pluggable",
    section = "cupola's pools inside PyTorch (`make torch-allocator`)",
    names = { "torch-allocator", "torch_allocator", "libcupola_torch", "CUPOLA_TORCH_POOL", "CUPOLA_TORCH_STREAMS" },
    overview = {
      { "make torch-allocator  (CUPOLA_TORCH_POOL=\"vmm\")", "cupola's pools serving PyTorch" },
    },
    page = [[
make torch-allocator builds build/libcupola_torch.so; in PyTorch:
  alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "cupola_torch_alloc",
                                                    "cupola_torch_free")
  torch.cuda.memory.change_current_allocator(alloc)  # before the first tensor
CUPOLA_TORCH_POOL="vmm" (default "tlsf"; "KIND,KEY=VALUE,...": any kind and
  its options, a value with commas in double quotes: 'torch,conf="a:1,b:2"')
  picks the pool; CUPOLA_TORCH_STREAMS="safe" (default: a free
  is held back until the other streams seen have passed it) or "trust";
  CUPOLA_BACKEND as for the module (PyTorch needs cuda).
cupola_torch_stats(buf, len) (ctypes) writes the pools' figures as JSON;
  cupola_torch_trim(device, keep), cupola_torch_check(), cupola_torch_error.
Predicting it offline: replay a snapshot of the workload through the same
  pool over the "virtual" upstream (cupola.trace.replay).
CUPOLA_TORCH_LOG=path writes every request (RMM CSV) to replay the run.
Step time: bench/torch_step.sh (GPU) times training steps per allocator;
  a pool's upstream calls once warm (device_allocs, device_frees in the
  stats; bench/steady_calls.lua offline) are what slows a step.  Serving,
  tlsf, caching and freelist keep every idle chunk unless the spec sets
  release_threshold (no call once warm; a refused cudaMalloc frees them
  and retries; cupola_torch_trim returns them); vmm remaps cached pages.]],
  },
  {
    name = "cupyalloc",
    section = "cupola's pools inside CuPy (`make cupy-allocator`)",
    names = { "cupy-allocator", "cupy_allocator", "libcupola_cupy", "cupola_cupy", "CUPOLA_CUPY_POOL",
      "CUPOLA_CUPY_STREAMS", "CUPOLA_CUPY_LOG", "CUPOLA_CUPY_LIB" },
    overview = {
      { "make cupy-allocator  (CUPOLA_CUPY_POOL=\"vmm\")", "cupola's pools serving CuPy" },
    },
    page = [[
make cupy-allocator builds build/libcupola_cupy.so (CuPy's CFunctionAllocator);
python/cupola_cupy.py installs it:
  import cupola_cupy; alloc = cupola_cupy.install()   # cupy.cuda.set_allocator
  alloc.stats(), alloc.trim(), cupola_cupy.uninstall()
CUPOLA_CUPY_POOL="vmm" (default "tlsf", CUPOLA_TORCH_POOL's syntax) picks the
  pool; CUPOLA_CUPY_STREAMS="trust" (default) or "safe"; CUPOLA_CUPY_LOG=path
  logs every request (RMM CSV); CUPOLA_CUPY_LIB: the library install() loads.
A refusal raises cupy.cuda.memory.OutOfMemoryError (a bad spec RuntimeError):
  the library returns NULL and the wrapper checks every pointer.
Streams: the wrapper passes cupy.cuda.get_current_stream().ptr in a param of
  each thread's own; a block goes back on the stream it was allocated on,
  and another stream reuses it once that stream passed the free (safe mode
  also waits for every other stream seen); every Stream an allocation was
  made on is kept alive (the pool may record on it when it frees).]],
  },
  {
    name = "bench",
    section = "Lua helpers: bench and report",
    names = { "bench", "report", "helpers", "device_ms", "host_ns", "median", "result", "table",
      "format_bytes", "csv", "json", "records", "columns", "progress", "help" },
    overview = {
      { "cupola.bench.device_ms(fn, {stream=}) -> ms", "median device time; .host_ns(fn, n)" },
      { "cupola.help(topic) -> string", "this; a topic, function or handle" },
    },
    page = [[
cupola.bench.device_ms(fn, {stream=default, reps=5, warmup=1}) -> median ms,
  samples: events recorded around fn() on the stream.
cupola.bench.host_ns(fn, n, {reps=5, warmup=1}) -> median ns per call, samples
cupola.bench.median(list) -> number
cupola.bench.result(name, median, samples, extra) -> a record for report.*
cupola.report.table(headers, rows) -> string: columns aligned, numbers right
cupola.report.bytes(n) -> "4.00 MiB" (cupola.format_bytes is the same)
cupola.report.csv(rows, path, {columns=}), cupola.report.json(rows, path)
  -> text (and the file): results of bench, trace.replay, trace.compare
cupola.report.records(rows, cols) -> aligned table (an incomplete replay's
  warning under it); cupola.report.columns(rows) -> the column names
cupola.report.progress(label, done, total, t0): a progress line on stderr,
  only on a terminal and after two seconds
cupola.help() -> the overview; cupola.help(topic) -> one topic's page, where
  topic is a name ("pool"), a function (cupola.pool) or a handle.]],
  },
  {
    name = "repl",
    section = "bin/cupola and the REPL",
    names = { "bin/cupola", "cupola", "CUPOLA_LUA" },
    overview = {
      { "bin/cupola script.lua   bin/cupola (the REPL)", "Lua 5.4 with `cupola` loaded" },
    },
    page = [[
bin/cupola script.lua [args...]   runs a script; `cupola` is a global
bin/cupola -e 'print(cupola.backend())'   any lua5.4 options
bin/cupola --help                 what bin/cupola does
bin/cupola                        the REPL: Lua 5.4 with cupola loaded;
  it names the backend and device, and help(topic) prints cupola.help.
  Tables print readably (show(v) too), errors at your line.  Each line
  runs on its own: a `local` is gone at the next line; use globals.
In a source tree it uses the tree's build (run make first); installed, the
module installed with it.  CUPOLA_LUA names the interpreter (lua5.4).]],
  },
  {
    name = "env",
    section = "Environment variables",
    names = { "environment", "CUPOLA_BACKEND", "CUPOLA_HOST_THREADS", "CUPOLA_TRACES", "CUPOLA_CACHE_DIR", "CUPOLA_CC",
      "CUPOLA_CXX", "CUPOLA_NVCC", "CUPOLA_INCLUDE", "CUPOLA_COMMIT", "CUDA_HOME", "CUDA_PATH" },
    overview = {
      { "CUPOLA_BACKEND  CUPOLA_HOST_DEVICES  ...", "environment variables cupola reads" },
    },
    page = [[
The environment variables cupola reads:
CUPOLA_BACKEND=host|cuda   the backend (default: cuda when a device exists)
CUPOLA_HOST_DEVICES=N      devices the host backend emulates (1)
CUPOLA_HOST_THREADS=N      threads running kernels on the host (the CPUs)
CUPOLA_NVTX=1              cupola's operations as NVTX ranges
CUPOLA_TRACES=dir          searched first by cupola.trace.find
CUPOLA_CACHE_DIR=dir       compile cache ($XDG_CACHE_HOME/cupola, $HOME/.cache)
TMPDIR                     where compiles get a scratch folder (/tmp)
CUPOLA_CC, CUPOLA_CXX      compilers for C plugins / host kernels (cc, c++)
CUPOLA_NVCC                nvcc for compiler="nvcc" (else CUDA_HOME/CUDA_PATH/
                           /usr/local/cuda bin/nvcc, then PATH)
CUPOLA_INCLUDE=dir:dir     a module's include path instead of cupola's
CUDA_HOME, CUDA_PATH       where NVRTC and nvJitLink are looked for first
CUPOLA_TORCH_POOL, CUPOLA_TORCH_STREAMS   libcupola_torch.so's pool, streams
CUPOLA_TORCH_LOG=path      libcupola_torch.so logs every request (RMM CSV)
CUPOLA_CUPY_POOL, CUPOLA_CUPY_STREAMS, CUPOLA_CUPY_LOG   the same for CuPy
CUPOLA_CUPY_LIB=path       the library python/cupola_cupy.py loads
CUPOLA_LUA                 the interpreter bin/cupola runs (lua5.4)
CUPOLA_BIN_LUADIR, CUPOLA_BIN_LIBDIR      set by bin/cupola itself
CUPOLA_RECORD_OUT, CUPOLA_RECORD_LIST, CUPOLA_RECORD_FLUSH_MS   set by
                           bin/cupola record for libcupola_record.so
CUPOLA_RECORD_LIB          the library bin/cupola record injects
CUPOLA_RECORD_LEVEL=runtime the recorder's runtime callbacks too
CUPOLA_RECORD_CENSUS=1, CUPOLA_RECORD_CALLERS=1   the recorder's diagnoses
LD_PRELOAD                 bin/cupola record puts its preload library first
CUPOLA_RECORD_ASSUME_DEVICE=1  bin/cupola record skips its backend check
CUPOLA_COMMIT              the commit cupola.survey records
PWD                        makes cupola.include_dir absolute]],
  },
  {
    name = "install",
    section = "Installing",
    names = { "installing", "luarocks" },
    overview = {
      { "luarocks --lua-version=5.4 make", "installing; make install" },
    },
    page = [[
Installing: luarocks --lua-version=5.4 make (system-wide), with --local or
--tree=DIR elsewhere (then eval "$(luarocks --lua-version=5.4 path)").  It
builds with the Makefile and installs cupola.core, the Lua modules,
bin/cupola, the shipped traces and the C headers.  make install does the
same without LuaRocks (PREFIX, LUADIR, LIBDIR, BINDIR, DESTDIR).]],
  },
}

local by_name = {}
for _, t in ipairs(help.topics) do
  by_name[t.name] = t
  for _, n in ipairs(t.names) do by_name[n] = by_name[n] or t end
end

local function topic_names()
  local out = {}
  for i, t in ipairs(help.topics) do out[i] = t.name end
  return table.concat(out, " ")
end

local function overview()
  local width = 0
  for _, t in ipairs(help.topics) do
    for _, l in ipairs(t.overview) do width = math.max(width, #l[1]) end
  end
  local out = {
    "cupola " .. (package.loaded.cupola and package.loaded.cupola.version or "")
      .. ": the API by section (help(\"pool\") for one; all of it: docs/API.md)",
  }
  for _, t in ipairs(help.topics) do
    for i, l in ipairs(t.overview) do
      out[#out + 1] = string.format("%-9s %-" .. width .. "s  %s", i == 1 and t.name or "", l[1], l[2])
    end
  end
  return table.concat(out, "\n")
end

-- The topic of a function or handle: its key in the cupola table (or one of
-- its sub-tables), or its type's __name.
local function resolve(x)
  if type(x) == "string" then return by_name[x] end
  if type(x) == "userdata" then
    local mt = getmetatable(x)
    return mt and by_name[mt.__name]
  end
  if type(x) == "function" or type(x) == "table" then
    local cupola = package.loaded.cupola or core
    for k, v in pairs(cupola) do
      if v == x then return by_name[k] end
    end
    for _, sub in ipairs { "kernels", "mempool", "trace", "bench", "report" } do
      if type(cupola[sub]) == "table" then
        for k, v in pairs(cupola[sub]) do
          if v == x then return by_name[sub] or by_name[k] end
        end
      end
    end
  end
  return nil
end

--- help.text(topic) -> string: the overview, or one topic's page.
function help.text(topic)
  if topic == nil then return overview() end
  local t = resolve(topic)
  if not t then
    raise(string.format("cupola.help: no topic %s (topics: %s)",
      type(topic) == "string" and shown(topic) or "for this " .. type(topic)
        .. ((type(topic) == "number" or type(topic) == "boolean") and " " .. tostring(topic) or ""),
      topic_names()))
  end
  local head = string.format("cupola.help \"%s\" (docs/API.md has the full reference)", t.name)
  return head .. "\n" .. t.page
end

--- help.banner() -> the REPL's first lines: version, backend and device.
function help.banner()
  local d = core.device()
  local what
  if d.backend == "host" then
    what = string.format("device emulated on the CPU (%s of host memory)", (require "cupola.report").bytes(d.memory))
  else
    what = string.format("device %d: %s, %s, compute capability %s", d.index, d.name,
      (require "cupola.report").bytes(d.memory), d.cc)
  end
  return string.format("cupola %s, backend %s, %s\nhelp() lists the API, help(\"pool\") one topic; cupola is loaded as `cupola`",
    package.loaded.cupola and package.loaded.cupola.version or "", core.backend(), what)
end

return help
