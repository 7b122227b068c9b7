--- cupola.advise.cupy: what cupola.advise knows of CuPy (the framework
-- module of CuPy's memory-hook logs; the interface is at the top of
-- lua/cupola/advise/modules.lua).  Its rows: CuPy's MemoryPool (pool kind "cupy",
-- the log replayed with its own addresses), and cupola's pools as CuPy
-- would get them through cupy.cuda.set_allocator (CUPOLA_CUPY_POOL).
--
-- CuPy's pool has one setting, its limit (set_limit, CUPY_GPU_MEMORY_LIMIT),
-- so the advice is about memory: the pool's peak beside the peak in use,
-- the least limit that runs the recorded work (always searched: the module
-- turns the search on), and what free_all_blocks() would have given back
-- at the pool's peak.
local util = require "cupola.util"
local report = require "cupola.report"
local core = require "cupola.core"
local raise = util.raise

local cupy = {
  name = "cupy",
  formats = { "cupy_hook" },
  via = "CUPY_GPU_MEMORY_LIMIT",
  json_fields = { "cupy_log_peak_total_bytes", "peak_live", "peak_used_bytes", "used_bytes_at_peak",
    "free_all_blocks_at_peak", "least_limit", "exact" },
  reads = {
    "a CuPy memory-hook log (JSON lines, as cupy.cuda.memory_hooks.DebugPrintHook writes them): its " ..
      "first character is not '{'",
  },
  usage = {
    reads = { "a CuPy memory-hook log (DebugPrintHook's JSON lines, or the recording hook's of docs/API.md, " ..
      "plain or gzip): CuPy's MemoryPool, the least set_limit that runs it, and cupola's pools inside CuPy " ..
      "(CUPOLA_CUPY_POOL)" },
    conf = "CuPy: none (its pool's one setting is its limit: --limit, or the least one, always searched)",
    recorded = "CuPy: none",
    pool = "CuPy: as CUPOLA_CUPY_POOL names it, e.g. vmm",
    device = "a CuPy log's, by device_id, one at a time",
    example = "CUPY_GPU_MEMORY_LIMIT=2147483648 python run.py",
  },
  aside_title = "cupola's pools inside CuPy (cupy.cuda.set_allocator, CUPOLA_CUPY_POOL):",
  terms = {
    calls = "device calls: how many times the pool asked CUDA for memory (cudaMalloc; cupola vmm: pages " ..
      "mapped): each is slow",
    least = "least memory: the smallest set_limit (to 2 MiB) under which the recorded requests all run, " ..
      "found by bisection; CuPy's pool frees whole free blocks and collects garbage before it refuses, as the " ..
      "replay does, and the CUDA context and libraries (cuFFT, cuBLAS plans) need device memory beside the pool",
  },
}

local bytes = report.bytes

-- A log names its devices by device_id, and the loader takes one device's
-- lines at a time (a pool each): it refuses a log of several without one.
cupy.device_ids = true
function cupy.needs_device(err)
  return err:find("each device has a pool of its own", 1, true) ~= nil
end

function cupy.title()
  return "CuPy memory-hook log"
end

--- cupy.check(o): CuPy's pool has no settings to give.
function cupy.check(o)
  if o.conf and #o.conf > 0 then
    raise("cupola.advise: option 'conf': CuPy's memory pool has no settings (its one setting is its limit: " ..
      "option 'limit', CuPy's set_limit)")
  end
  if o.recorded then
    raise("cupola.advise: option 'recorded': CuPy's memory pool has no settings to have been recorded under")
  end
end

--- cupy.recorded_limit(t) -> {low =, high =, replays =}, or nil and why: the
-- set_limit the recorded run had, from a log in which CuPy refused requests
-- (advise/search.lua's limit_interval): below it a cudaMalloc the run made is
-- refused, or free_all_blocks runs where it did not (less is held than the
-- log's total_bytes, or more cudaMallocs are made); above it a request the
-- run was refused is served, or more is held.  A limit counts as the run's
-- only where the replay is exact (every malloc, refusal, cudaMalloc and
-- total_bytes as logged).  nil, "exact" where the replay without a limit
-- already is (the device refused them: the log's alloc lines carry that).
function cupy.recorded_limit(t)
  local info = t:info()
  local c = info.cupy
  if (info.ooms or 0) == 0 then return nil, "no refusal" end
  local recorded = (c.device_allocs + c.device_alloc_failures) > 0 and "recorded" or nil
  local function side(L)
    local p <close> = core.pool { kind = "cupy", upstream = "virtual", max = L }
    local r = t:replay(p, { addresses = recorded, progress = false, idle_streams = true })
    local x = r.cupy
    if x.exact then return 0, r end
    local m = x.mismatch
    if m and m.what == "refused" then return -1, r end
    if m and m.what == "served" then return 1, r end
    if m then return m.model < m.log and -1 or 1, r end -- total_bytes: less held is a collection the run did not do
    -- only the cudaMallocs differ: more of them is a pool that gave its
    -- blocks back and took them again under too low a limit
    if r.device_allocs ~= c.device_allocs then return r.device_allocs > c.device_allocs and -1 or 1, r end
    return nil, r
  end
  local v, r0 = side(nil)
  if v == 0 then return nil, "exact" end
  if v ~= 1 then return nil, "no limit" end
  -- the log's peak total_bytes was held under the limit
  local a = c.peak_total_bytes and c.peak_total_bytes > 0 and c.peak_total_bytes - 1 or 0
  local lim = require("cupola.advise.search").limit_interval(side, a, r0.peak_reserved)
  if not lim then return nil, "no limit" end
  return lim
end

function cupy.setup(ctx)
  local info, result, o = ctx.info, ctx.result, ctx.o
  local W, N = result.warnings, result.notes
  local c = info.cupy
  -- the limit is CuPy's only setting: the least one is the advice
  o.search = true
  ctx.recorded_addresses = (c.device_allocs + c.device_alloc_failures) > 0
  result.cupy_log_peak_total_bytes = c.peak_total_bytes
  result.peak_live = info.peak_live
  if not c.has_stream then
    N[#N + 1] = "the log has no stream keys: every request is replayed on the default stream's arena " ..
      "(a program that used other streams gets one arena per stream in CuPy; the recording hook of " ..
      "docs/API.md logs them)"
  end
  if not c.has_malloc_preprocess then
    N[#N + 1] = "the log has no malloc_preprocess lines: frees that Python's gc.collect() did inside a " ..
      "malloc (under a limit) replay as frees before it"
  end
  if c.free_all_blocks == 0 then
    N[#N + 1] = "no free_all_blocks lines: calls of your program to free_all_blocks() are not in the log " ..
      "(no CuPy hook reports them), so the replay cannot see them"
  end
  if (info.ooms or 0) > 0 and not o.limit then
    local lim, why = cupy.recorded_limit(ctx.t)
    if lim then
      ctx.set_limit(lim, "log")
    elseif why ~= "exact" then
      W[#W + 1] = ("CuPy refused %d request%s in the recorded run (under set_limit, or with the device full), " ..
        "and no limit makes the replay do what the log shows: give the run's limit with --limit (option " ..
        "'limit') for the replay of CuPy's pool to be the recorded run"):format(info.ooms,
        info.ooms > 1 and "s" or "")
    end
  end
  if (info.unmatched or 0) > 0 then
    W[#W + 1] = ("%d frees of blocks allocated before the log began were skipped (install the hook before " ..
      "the first allocation): the figures cover only what the log shows"):format(info.unmatched)
  end
end

--- cupy.rows(ctx) -> CuPy's pool, and cupola's pools set aside beside it.
function cupy.rows(ctx)
  local rows = {
    { setting = "", kind = "cupy", family = "recorded", recorded = true, keys = 0, via = cupy.via,
      job = { spec = "cupy", recorded = ctx.recorded_addresses or nil }, pool = "cupy" },
  }
  ctx.npools = 0
  for _, spec in ipairs(ctx.o.pools or {}) do
    rows[#rows + 1] = { setting = "CUPOLA_CUPY_POOL=" .. spec, kind = spec:match "^%s*([^,%s]+)" or spec,
      pool = spec, family = "pool", aside = true, via = "CUPOLA_CUPY_POOL", job = { spec = spec } }
    ctx.npools = ctx.npools + 1
  end
  return rows
end

--- cupy.baseline(ctx): CuPy's own peak where the log has total_bytes, else its replay's.
function cupy.baseline(ctx)
  local log = ctx.info.cupy.peak_total_bytes
  if log and log > 0 then return log, "CuPy's own peak total_bytes in the log" end
  local r = ctx.cupy_row
  return r and r.replay and not r.replay.error and r.replay.peak_reserved or nil, "CuPy's pool, replayed"
end

function cupy.describe(r)
  if r.kind == "cupy" then return "CuPy's MemoryPool" end
  return "cupola " .. r.pool .. " inside CuPy"
end

function cupy.fill(r, x, ctx)
  local c = x.cupy
  if r.kind == "cupy" and c then
    local res = ctx.result
    r.exact = c.exact
    r.prediction = c.exact and (x.recorded and "exact (recorded addresses)" or "exact") or
        (c.mismatch and ("the model differs from the log at line %d (%s)"):format(c.mismatch.line, c.mismatch.what)
          or "the model's cudaMallocs differ from the log's")
    res.peak_used_bytes = c.peak_used_bytes
    res.used_bytes_at_peak = c.used_bytes_at_peak
    res.free_all_blocks_at_peak = c.free_all_blocks_at_peak
    res.exact = c.exact
    res.least_limit = x.min_limit
    res.pool_peak = x.peak_reserved
    ctx.cupy_row = r
  else
    r.prediction = "cupola's pool, replayed"
  end
end

--- cupy.paste(r, ctx) -> the line to run the program with row r, and a
-- note on it.  CuPy's pool under a limit it fits in: that limit; under one
-- it does not: the least that runs it (the answer says "with that much or
-- more"); without a limit nothing needs changing: the least limit is
-- information, not a setting to paste (it lies below the pool's own peak,
-- where CuPy frees its cache and retries, and a run that asks for a little
-- more than the recording did runs out).
function cupy.paste(r, ctx)
  if r.kind ~= "cupy" then
    return "CUPOLA_CUPY_POOL=" .. r.pool .. " python run.py",
      "cupola's pool as CuPy's allocator (CFunctionAllocator; docs/API.md)"
  end
  local limit = ctx and ctx.o.limit
  if limit and r.fits then
    return ("CUPY_GPU_MEMORY_LIMIT=%d python run.py"):format(limit),
      ("set_limit(size=...) at the limit it runs in (%s)%s"):format(bytes(limit),
        r.min_memory and ("; the least that runs it is %s"):format(bytes(r.min_memory)) or "")
  end
  if limit and r.min_memory then
    return ("CUPY_GPU_MEMORY_LIMIT=%d python run.py"):format(r.min_memory),
      ("the least set_limit(size=...) that runs the recorded requests (%s)"):format(bytes(r.min_memory))
  end
  if r.min_memory then
    return "python run.py", ("CuPy's defaults: no change needed; the least set_limit that runs the recorded " ..
      "requests is %s (%d bytes), %s: a limit so tight makes CuPy free its cache and retry, and a run that " ..
      "asks for more than this one did runs out"):format(bytes(r.min_memory), r.min_memory,
      r.peak_reserved and r.min_memory < r.peak_reserved and ("below the pool's own peak of %s"):format(
        bytes(r.peak_reserved)) or "no headroom")
  end
  return "python run.py", "CuPy's defaults"
end

--- cupy.summary(res) -> lines for the head of the text report.
function cupy.summary(d)
  local lines = {}
  if d.pool_peak then
    lines[#lines + 1] = ("CuPy's pool at its peak: total_bytes %s%s; used_bytes %s then (peak %s); most in " ..
      "use at once %s (as requested)"):format(bytes(d.pool_peak),
      d.cupy_log_peak_total_bytes and (" (the log's own: %s)"):format(bytes(d.cupy_log_peak_total_bytes)) or "",
      bytes(d.used_bytes_at_peak or 0), bytes(d.peak_used_bytes or 0), bytes(d.peak_live or 0))
    lines[#lines + 1] = ("free_all_blocks() at that peak would have given back %s (free chunks that are whole " ..
      "cudaMalloc blocks; the %s of free split chunks stay)"):format(bytes(d.free_all_blocks_at_peak or 0),
      bytes(math.max(d.pool_peak - (d.used_bytes_at_peak or 0) - (d.free_all_blocks_at_peak or 0), 0)))
  else
    lines[#lines + 1] = ("most in use at once: %s (as requested)"):format(bytes(d.peak_live or 0))
  end
  if d.least_limit then
    lines[#lines + 1] = ("the least set_limit that runs it: %s (to 2 MiB)"):format(bytes(d.least_limit))
  end
  return lines
end

function cupy.notes(result, ctx)
  local N = result.notes
  if result.exact then
    N[#N + 1] = "figures: cupola's model of CuPy 14.1-14.2's MemoryPool, replayed offline; the log replays " ..
      "exactly (every cudaMalloc, total_bytes where logged, where it ran out)"
  else
    N[#N + 1] = "figures: cupola's model of CuPy 14.1-14.2's MemoryPool, replayed offline (exact on all of " ..
      "cupola's recordings with their stream, malloc_preprocess and free_all_blocks lines; this log's replay " ..
      "differs from it: see the row)"
  end
  if ctx.npools > 0 then
    N[#N + 1] = "cupola rows: cupola's pools serving CuPy's requests (the log's sizes) in place of its pool, " ..
      "each as libcupola_cupy.so makes it: tlsf, freelist and caching keep every idle chunk (release_threshold " ..
      "= 2^63 - 1, the serving policy), where cupola.pool's default returns them as the pool grows; device " ..
      "calls are their upstream calls (vmm: pages mapped)"
  end
end

return cupy
