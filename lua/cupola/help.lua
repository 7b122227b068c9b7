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

-- Each topic: the names that lead to it (keys of cupola or of its tables,
-- handle type names), its lines in the overview, and its page.
help.topics = {
  {
    name = "basics",
    names = { "bytes", "version" },
    overview = {
      { "cupola.bytes(size) -> integer", "sizes: 4096, \"64KiB\", \"4MiB\", ..." },
    },
    page = [[
Sizes are integer bytes or strings with binary units: "256B", "64KiB", "4MiB",
"1.5GiB" (cupola.bytes turns one into an integer).  Negative, fractional or
malformed sizes raise an argument error.
Handles (Stream, Event, Buffer, Mempool, Pool, Trace) have __name "cupola.X",
__tostring, __gc and __close: `local b <close> = pool:alloc("1MiB")` frees at
the end of the scope.  close() is safe twice; using a closed handle raises
"attempt to use a closed cupola.X".
Misuse raises an error naming the argument or option.  Running out of memory
returns nil, message, "out_of_memory" and leaves the allocator consistent.
Other CUDA failures raise with the CUDA error name.
A stream argument is optional everywhere: the default is cupola.default_stream.
cupola.version is this library's version string.]],
  },
  {
    name = "device",
    names = { "backend", "device", "synchronize", "mem_info", "clock" },
    overview = {
      { "cupola.backend() -> \"cuda\" | \"host\"", "CUPOLA_BACKEND=host|cuda forces one" },
      { "cupola.device() -> {name, memory, sms, cc, ...}", "the device in use" },
      { "cupola.synchronize()", "waits for all work on the device" },
      { "cupola.mem_info() -> free, total", "device memory, bytes" },
      { "cupola.clock() -> seconds", "monotonic host clock" },
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
cupola.clock() -> seconds on the monotonic clock (host-side timing).]],
  },
  {
    name = "devices",
    names = { "device_count", "set_device", "current_device", "can_access_peer", "enable_peer_access",
      "import", "export", "set_access", "access" },
    overview = {
      { "cupola.device_count()  cupola.set_device(i)", "several GPUs; device= options" },
      { "cupola.enable_peer_access(i, j)", "can_access_peer(i, j); copies across" },
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
    name = "stream",
    names = { "stream", "default_stream", "cupola.Stream" },
    overview = {
      { "cupola.stream{priority=0, blocking=false} -> Stream", "a new stream" },
      { "cupola.default_stream", "CUDA's legacy stream 0" },
      { "s:synchronize()  s:query() -> idle  s:wait(event)", "Stream methods; s.id, s.closed" },
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
e:close()]],
  },
  {
    name = "malloc",
    names = { "malloc", "malloc_async" },
    overview = {
      { "cupola.malloc(size) -> Buffer", "cudaMalloc; b:free() is cudaFree" },
      { "cupola.malloc_async(size, s) -> Buffer", "cudaMallocAsync, current mempool" },
    },
    page = [[
cupola.malloc(size) -> Buffer | nil, msg, "out_of_memory"
  cudaMalloc.  b:free() is cudaFree, which synchronizes the device.  A
  collected malloc buffer is freed at the next cupola.malloc, explicit free of
  a malloc buffer or cupola.synchronize() (finalizers never synchronize).
cupola.malloc_async(size, s) -> Buffer | nil, msg, "out_of_memory"
  cudaMallocAsync on s (default stream if absent) from the current mempool;
  b:free(s2) is cudaFreeAsync on s2, by default on b.stream.]],
  },
  {
    name = "mempool",
    names = { "mempool", "cupola.Mempool" },
    overview = {
      { "cupola.mempool{location=, max_size=, ...} -> Mempool", "a native CUDA pool" },
      { "cupola.mempool.default() .current() .set_current(p)", "the device's pools" },
      { "p:alloc(size, s)  p:trim(keep)  p:reset_high()", "Mempool methods; p:stats()" },
      { "p.release_threshold  p.used_current  p.used_high ...", "attributes are fields" },
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
    names = { "pool", "cupola.Pool" },
    overview = {
      { "cupola.pool{kind=\"tlsf\", upstream=\"device\", ...}", "-> Pool: allocators written in C" },
      { "p:alloc(size, s)  p:trim(keep)  p:reset()  p:stats()", "Pool methods; p.kind, p.upstream" },
      { "p:alloc_raw(size, s) -> address  p:free_raw(a, s)", "raw blocks: no Buffer; p:buffer(a)" },
    },
    page = [[
cupola.pool{...} -> Pool | nil, msg, "out_of_memory" (initial not available)
  kind      "tlsf" (default) | "freelist" | "caching" | "arena" | "vmm" | "plugin"
            | "cub"
            | "torch" (PyTorch 2.11's caching allocator, exactly)
  torch: conf= (PYTORCH_CUDA_ALLOC_CONF syntax), max= (PyTorch's allowed
    maximum), device_memory=, address_model="driver" | "bump"; upstream
    "device" or "virtual"; p:empty_cache(), p:settings(); stats() adds
    PyTorch's counters ("allocated_bytes.all.peak", num_alloc_retries, ...)
  plugin: path= (a .so) or source= (C, compiled and cached), symbol= (its
    const cupola_allocator, <cupola/allocator.h> in cupola.include_dir),
    options= (a string for its create)
  cub: CUB's CachingDeviceAllocator, exactly: bin_growth=8, min_bin=3,
    max_bin=7, max_cached_bytes=6291455 (CUB's defaults; no initial)
  upstream  "device" (default) | "async" | "managed" | "pinned" | "virtual"
  initial=0 bytes reserved at creation   grow=true may reserve more
  max=0 (none) limit on reserved         alignment=256 (a power of two)
  release_threshold=0 idle bytes kept    reuse="event" | "stream" | "wait"
    (vmm without it: decides by time, on its clock)
  fallback=false serve from the upstream what the pool cannot
  limit=size refuse allocations past it  log=path RMM CSV of every call
  clock="wall" | "manual" (seconds since made; manual: set by the script)
p:alloc(size, s) -> Buffer | nil, msg, "out_of_memory"; b:free(s) gives it back
p:alloc_raw(size, s) -> address (an integer) | nil, msg, "out_of_memory": the
  same block without a Buffer (a pair costs the pool's work and two calls);
  p:free_raw(a, s) frees it, on its own stream by default.  The pool checks
  every address against its map: a double free, an address inside a block,
  one it never gave or one a Buffer owns raises.  p:buffer(a) -> Buffer
  takes the block over (its free gives it back; free_raw(a) then raises).
  Raw blocks live at p:close() are freed with the pool; close returns how
  many.  Kernels of one's own take the address as a "ptr" argument.
p:trim(keep=0)    returns free chunks to the upstream
p:reset()         arena only: frees every block (its buffers become closed)
p:empty_cache()   torch only: torch.cuda.empty_cache();  p:settings() torch only
p:stats() -> used, used_peak, reserved, reserved_peak, allocs, frees, failed,
  largest_free, free_bytes, fragmentation, live_buffers, live_raw (vmm:
  page_bytes, pages_mapped, maps, unmaps; by time: recent_peak, decay_window,
  map_budget;
  cub: device_allocs, device_frees, device_alloc_failures, retries,
  cached_bytes, cached_blocks, live_bytes)
p:time() -> s     the pool's clock; p:set_time(t), p:advance(dt): manual only
p:close() -> n    raises while buffers are live; n: raw blocks freed with it
Fields: p.kind, p.upstream, p.reuse, p.alignment, p.clock, p.closed.
cupola.conformance(make_pool, opts) -> {ok=, violations=, ops=, reproducer=}:
  the battery every pool passes, against make_pool(o); in busted specs:
  require "cupola.busted"; assert.is_conforming_pool(make_pool, opts)]],
  },
  {
    name = "buffer",
    names = { "cupola.Buffer" },
    overview = {
      { "b.size  b.address  b.stream  b.pool  b.origin", "Buffer fields (also b.freed, #b)" },
      { "b:free(s)  b:read(off, len, s)  b:write(str, off, s)", "Buffer methods ..." },
      { "b:memset(byte, s)  b:copy_to(dst, s)  b:close()", "... ordered on s, else b.stream" },
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
    names = { "kernels", "fill", "sqrt_index", "checksum", "spin", "pattern", "verify" },
    overview = {
      { "cupola.kernels.fill(b, value, {type=\"f32\"})", "every element = value" },
      { "cupola.kernels.sqrt_index(b)", "f32 data[i] = sqrt(i)" },
      { "cupola.kernels.checksum(b, {type=\"f32\"}) -> number", "sum of the elements (waits)" },
      { "cupola.kernels.spin(us, {stream=})", "keeps a stream busy (microseconds)" },
      { "cupola.kernels.pattern(b, seed)  .verify(b, seed)", "write / count bytes that differ" },
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
    names = { "module", "module_cache_stats", "module_cache_forget", "cupola.Module", "cupola.Kernel" },
    overview = {
      { "cupola.module{source=, name=, options=} -> Module", "your CUDA C, compiled at run time" },
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
Fields: m.name, m.cached (the compile was a cache hit), m.log.
cupola.module_cache_stats() -> {memory_hits=, disk_hits=, misses=, ...}
cupola.module_cache_forget() empties the in-memory cache.]],
  },
  {
    name = "dpool",
    names = { "device_pool", "run_concurrent", "cupola.DevicePool" },
    overview = {
      { "cupola.device_pool{kind=, capacity=}", "-> DevicePool: allocation in kernels" },
      { "dp:run{threads=, bytes=, free=}", "-> {ok=, failed=, overlaps=, ms=}" },
    },
    page = [[
cupola.device_pool{kind="bump"|"warp_bump"|"slab"|"malloc"|"heap", capacity=} ->
  DevicePool: an allocator that runs inside kernels (malloc: CUDA's own; heap:
  16 B up to the pool, free from any thread, no reset needed).
cupola.device_pool{kind="plugin", source=SRC | path="mine.cu", capacity=,
  name=, options=, init_threads=1024}: your own allocator (cupola/plugin.h:
  cupola_plugin_init/alloc/free), run and checked as cupola's pools are.
dp:run(opts) with opts = {threads=N, bytes=B or {min, max}, stream=,
  free=false, block=256, verify=true, reset=, hold_us=, seed=, children=}
  (written dp:run{...}) -> {ok=, failed=,
  overlaps=, misaligned=, ms=, per_second=, ...}: threads allocate, write
  their block, optionally free; a verification kernel counts overlaps.
cupola.run_concurrent{ {pool=dp, <run options>, wait=ev, record=ev}, ... }
  -> results: several runs in flight at once (two streams racing on one pool).
dp:reset(s)   dp:stats() -> {capacity, used, peak, failed}   dp:close()
In your kernels: #include <cupola/device.h>; cupola_alloc(pool, bytes) (NULL
  when exhausted) and cupola_free(pool, ptr) on a "device_pool" parameter;
  also from child kernels (CUDA backend).
require("cupola.survey").run{allocators={"heap", "slab", "malloc", ...}} ->
  the survey's benchmarks (Winter et al., PPoPP 2021) on any pool and CUDA's
  malloc; survey.csv/json/html/markdown(res, path) write them.]],
  },
  {
    name = "trace",
    names = { "trace", "find", "load", "replay", "compare", "cupola.Trace" },
    overview = {
      { "cupola.trace.find(name) -> path", "a trace that ships with cupola" },
      { "cupola.trace.load(path) -> Trace", "RMM logging CSV, plain or gzip" },
      { "cupola.trace.replay(t, pool, opts) -> figures", "replayed in C, stream-ordered" },
      { "cupola.trace.compare(t, {cfg, ...}) -> rows", "one replay per pool configuration" },
      { "#t  t.peak_live  t:event(i)  t:info()  t:replay(p)", "Trace fields and methods" },
    },
    page = [[
cupola.trace.find(name) -> path | nil, msg: "gpt2_train", "gpt2_train.csv.gz"
  looked up in $CUPOLA_TRACES, beside the installed module, examples/traces.
cupola.trace.load(path) -> Trace (RMM logging-adaptor CSV
  Thread,Time,Action,Pointer,Size,Stream; plain or gzip); malformed input
  raises "path:line: reason".
cupola.trace.replay(t, pool, {single_stream=false, repeat=1,
  synchronize=true, clock="pool"|"trace", stop_at_oom=false,
  addresses="model"|"recorded"}) -> {events, ns_per_event, seconds,
  peak_live, peak_reserved, reserved_over_live, failed, skipped_frees,
  complete, reserved_byte_seconds, live_byte_seconds, maps, unmaps,
  peak_allocated, device_allocs, device_frees, retries, ooms, ...};
  addresses="recorded" (a torch pool, a PyTorch snapshot): CUDA's
  addresses as recorded, and divergence = false or where the model's
  calls first differed
cupola.trace.compare(t, configs, opts) -> rows: configs are tables for
  cupola.pool (plus name=); each row is replay's table plus kind, upstream, name.
Trace: #t events; fields events, allocs, frees, streams, threads, leaked,
  peak_live, total_bytes, max_size, duration_us, path; t:info() -> all of them;
  t:event(i) -> {action, pointer, size, stream, thread, time_us};
  t:replay(pool, opts); t:close().]],
  },
  {
    name = "advise",
    names = { "advise", "torch", "pytorch" },
    overview = {
      { "cupola.advise(snapshot, {limit=}) -> result", "the PYTORCH_CUDA_ALLOC_CONF to use" },
    },
    page = [[
cupola.advise(trace_or_path, {limit=, conf={...}, recorded=, pools={...},
  search=, threads=, device=, progress=}) -> {rows, recommended, paste,
  warnings, notes, ...}: a PyTorch snapshot (torch.cuda.memory._dump_snapshot,
  either pickle writer, plain or gzip; or an RMM log) replayed through the
  model of PyTorch's allocator under a grid of settings (the recorded one,
  defaults, expandable_segments, max_split_size_mb from its own request
  sizes, roundup_power2_divisions 1..16, garbage_collection_threshold under
  a limit, the best combined, yours) and through cupola's pools (tlsf, vmm,
  caching: the pluggable allocator), in C threads.  Each row: setting,
  kind, peak_reserved, unused_at_peak, device_allocs, retries, change_pct;
  with limit: fits, fails_at, min_memory (the least memory it runs in).
  res.paste: the line to run, PYTORCH_CUDA_ALLOC_CONF=... python train.py.
bin/cupola advise SNAPSHOT [--limit 24GiB] [--conf C]... [--json] [--html P]
  prints the same (bin/cupola advise --help).]],
  },
  {
    name = "timeline",
    names = { "timeline", "nvtx", "push", "pop", "range", "mark", "depth" },
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
cupola.nvtx.push(name), cupola.nvtx.pop(), cupola.nvtx.mark(name),
  cupola.nvtx.range(name, fn, ...) -> fn's results (closed even on error),
  cupola.nvtx.depth() -> open ranges.  NVTX v3; a no-op without CUDA.
  CUPOLA_NVTX=1: pool operations and launches are ranges in domain "cupola".
Out of memory from a pool: nil, message, "out_of_memory", info where info
  = {requested, free, largest_free, fragmentation, reserved, used, kind}.]],
  },
  {
    name = "bench",
    names = { "bench", "report", "device_ms", "host_ns", "median", "table", "format_bytes", "help" },
    overview = {
      { "cupola.bench.device_ms(fn, {stream=}) -> ms", "median device time, by events" },
      { "cupola.bench.host_ns(fn, n, {reps=5}) -> ns", "median host time per call" },
      { "cupola.report.table(headers, rows) -> string", "an aligned text table" },
      { "cupola.report.bytes(n) -> \"4.00 MiB\"", "also cupola.format_bytes" },
      { "cupola.help(topic) -> string", "this; a topic, function or handle" },
    },
    page = [[
cupola.bench.device_ms(fn, {stream=default, reps=5, warmup=1}) -> median ms,
  samples: events recorded around fn() on the stream.
cupola.bench.host_ns(fn, n, {reps=5, warmup=1}) -> median ns per call, samples
cupola.bench.median(list) -> number
cupola.report.table(headers, rows) -> string: columns aligned, numbers right
cupola.report.bytes(n) -> "4.00 MiB" (cupola.format_bytes is the same)
cupola.bench.result(name, median, samples, extra) -> a record for report.*
cupola.report.csv(rows, path) / .json(rows, path) -> text (and the file):
  results of bench, trace.replay and trace.compare as data
cupola.report.records(rows, cols) -> aligned table; .columns(rows) -> names
cupola.report.progress(label, done, total, t0): a progress line on stderr,
  only on a terminal and after two seconds
cupola.help() -> the overview; cupola.help(topic) -> one topic's page, where
  topic is a name ("pool"), a function (cupola.pool) or a handle.]],
  },
}

local by_name = {}
for _, t in ipairs(help.topics) do
  by_name[t.name] = t
  for _, n in ipairs(t.names) do by_name[n] = by_name[n] or t end
end
by_name.report = by_name.bench
by_name.helpers = by_name.bench

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
      out[#out + 1] = string.format("%-8s %-" .. width .. "s  %s", i == 1 and t.name or "", l[1], l[2])
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
