-- bench/device_peers.lua: cupola's heap beside the field's in-kernel
-- allocators (Gallatin, Ouroboros pages and chunks, FDGMalloc), each run
-- from the user's own checkout through its adapter (bench/peers/), in the
-- survey's benchmarks (cupola.survey).
--
--   lua5.4 bench/device_peers.lua PEERS OUTDIR list
--   lua5.4 bench/device_peers.lua PEERS OUTDIR warm NAME
--   lua5.4 bench/device_peers.lua PEERS OUTDIR run NAME
--   lua5.4 bench/device_peers.lua PEERS OUTDIR own NAME THREADS SIZE
--   lua5.4 bench/device_peers.lua PEERS OUTDIR merge
--
-- PEERS is the folder holding the checkouts (gallatin/, ouroboros/,
-- survey/: see docs/API.md); a peer whose checkout is missing is left out
-- and the table says so.
--   list   the names of the allocators whose checkouts are there, one a line
--   warm   compiles NAME's modules (nvcc: tens of seconds a peer) into the
--          cache, with a small pool: bench/device_peers.sh runs these side by
--          side before anything is timed
--   run    every test of the comparison for NAME alone, in this process (a
--          peer that faults takes only its own rows down), within
--          PEERS_TIME_LIMIT seconds (default 60); OUTDIR/peers-NAME.json
--   own    the harness's figure beside a peer's own benchmark: NAME's
--          allocation of THREADS blocks of SIZE bytes (the survey's
--          per-thread test, that count and size alone); prints one line
--   merge  OUTDIR/peers-*.json into one result: OUTDIR/device_peers-survey.
--          {md,csv,json,html} (one table per test, every allocator a column)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local survey = require "cupola.survey"

local peers, out, mode, name = arg[1], arg[2], arg[3], arg[4]
if not (peers and out and mode) then
  io.stderr:write "usage: lua5.4 bench/device_peers.lua PEERS OUTDIR list|warm|run|own|merge [NAME ...]\n"
  os.exit(2)
end
local GiB, MiB = 2^30, 2^20

local function isdir(p)
  local f = io.open(p .. "/.", "r")
  if f then f:close() return true end
  return false
end

-- The allocators, in the order of the table's columns.  FDGMalloc takes its
-- memory from CUDA's heap (sized below, before any kernel runs) and never
-- frees a block: it goes last.
local ALL = {
  { name = "heap", spec = "heap" },
  { name = "Gallatin", dir = "gallatin/include",
    spec = { kind = "plugin", path = "bench/peers/gallatin.cu", compiler = "nvcc" } },
  { name = "Ouroboros-P", dir = "ouroboros/include",
    spec = { kind = "plugin", path = "bench/peers/ouroboros.cu", compiler = "nvcc" } },
  { name = "Ouroboros-C", dir = "ouroboros/include",
    spec = { kind = "plugin", path = "bench/peers/ouroboros.cu", compiler = "nvcc", options = { "-DOURO_CHUNKS" } } },
  { name = "FDGMalloc", dir = "survey/frameworks/fdg",
    spec = { kind = "plugin", path = "bench/peers/fdgmalloc.cu", compiler = "nvcc" } },
}

local function allocator(n)
  for _, a in ipairs(ALL) do
    if a.name == n then
      if type(a.spec) == "string" then return { kind = a.spec, name = a.name }, a end
      local s = { name = a.name }
      for k, v in pairs(a.spec) do s[k] = v end
      s.include = { peers .. "/" .. a.dir }
      s.plugin_name = a.name .. ".cu"
      return s, a
    end
  end
  error("no allocator named " .. tostring(n))
end

local function present(a) return not a.dir or isdir(peers .. "/" .. a.dir) end

-- CUDA's in-kernel heap, for FDGMalloc and Ouroboros's requests above 8 KiB:
-- sized once per process before any kernel calls malloc (cupola's "malloc"
-- pool sets the limit), kept open for the process.
local heap_pool
local function size_cuda_heap(bytes)
  local msg
  while not heap_pool and bytes >= 64 * MiB do
    -- a device that cannot reserve so large a heap gets the largest it can
    heap_pool, msg = cupola.device_pool { kind = "malloc", capacity = bytes }
    bytes = bytes // 2
  end
  if not heap_pool then io.stderr:write("CUDA's heap left as it is: ", tostring(msg), "\n") end
end

-- The comparison's options: the survey's own counts on the GPU (1e5
-- allocations a test, pairs at 1e6 threads), fewer repetitions and thread
-- counts than bench/device_survey.lua so that five allocators fit one
-- command.
local GPU = cupola.backend() == "cuda"
local function options(limit)
  local o = {
    capacity = GPU and 8 * GiB or 256 * MiB,
    frag_capacity = GPU and 2 * GiB or 64 * MiB,
    -- 1 GiB: Ouroboros's page variant keeps some 320 MiB of queues in its
    -- capacity (bench/device_survey.lua measures the heap at 256 MiB)
    oom_capacity = GPU and 1 * GiB or 16 * MiB,
    -- the headline first; out of memory last (a peer that spins when it has
    -- no memory left costs only what comes after it)
    tests = { "init", "registers", "pairs", "thread", "warp", "mixed", "frag", "synth", "synth_write", "oom" },
    iterations = 3,
    budget_ms = 1000,
    threads = GPU and 100000 or 2000,
    warps = GPU and 10000 or 200,
    sizes = { 16, 64, 256, 1024, 4096, 8192 },
    mixed_ranges = { 64, 512, 4096, 8192 },
    pair_sizes = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536 },
    pair_threads = GPU and 1000000 or 5000,
    -- a peer that takes seconds a launch at some size is probed first
    pair_probe = GPU and { 10000, 100000 } or false,
    frag_sizes = { 16, 64, 256, 1024, 4096, 8192 },
    oom_sizes = { 16, 256, 4096, 65536, 1048576 },
    oom_threads = GPU and 100000 or 2000,
    synth_ranges = { 64, 4096 },
    synth_threads = GPU and { 1, 32, 1024, 32768, 1048576 } or { 1, 32, 1024 },
    synth_writes = GPU and 10 or 2,
    time_limit = limit,
  }
  -- PEERS_TESTS=a,b,...: only those tests (a run narrowed to what a peer survives)
  local only = os.getenv "PEERS_TESTS"
  if only and only ~= "" then
    o.tests = {}
    for t in only:gmatch "[^,%s]+" do o.tests[#o.tests + 1] = t end
  end
  return o
end

if mode == "list" then
  for _, a in ipairs(ALL) do
    if present(a) then print(a.name) end
  end
  return
end

if mode == "warm" then
  local spec = allocator(name)
  if spec.kind ~= "plugin" then return end
  local t0 = cupola.clock()
  -- the pool's module, the host part and the survey's module, compiled
  local res = survey.run { allocators = { spec }, tests = { "registers" }, capacity = 1 * GiB }
  local r = res.rows[1] or {}
  print(string.format("warm %s: %.1f s, registers alloc %s free %s", name, cupola.clock() - t0,
    tostring(r.alloc_registers), tostring(r.free_registers)))
  return
end

local function write_json(path, res)
  survey.json(res, path)
end

if mode == "run" then
  local spec = allocator(name)
  size_cuda_heap(GPU and 16 * GiB or 64 * MiB)
  local limit = tonumber(os.getenv "PEERS_TIME_LIMIT") or 60
  local o = options(limit)
  o.allocators = { spec }
  local rows = assert(io.open(out .. "/peers-" .. name .. ".rows", "w"))
  local t0 = cupola.clock()
  -- the rows so far, as JSON after each (a run that faults or is killed
  -- still leaves what it measured for the merge)
  local d = cupola.device()
  local partial = { meta = { device = d.name, backend = cupola.backend(), sms = d.sms, cc = d.cc,
    date = os.date "!%Y-%m-%d %H:%M UTC", commit = os.getenv "CUPOLA_COMMIT", iterations = o.iterations,
    budget_ms = o.budget_ms, timing = GPU and "CUDA events around each launch" or
      "the host backend: kernels run on the CPU, times are the CPU's",
    cut_short = "the process ended before its run did (see its log): these are the rows it measured" },
    rows = {} }
  o.progress = function(r)
    partial.rows[#partial.rows + 1] = r
    write_json(out .. "/peers-" .. name .. ".json", partial)
    rows:write(string.format("%7.1fs %-10s %-12s size=%-8s threads=%-8s %s\n", cupola.clock() - t0, r.test,
      r.allocator, tostring(r.size or ""), tostring(r.threads or ""),
      r.alloc_ms and string.format("alloc %.4f free %.4f ms failed %d corrupt %d", r.alloc_ms, r.free_ms or 0,
        r.failed or 0, r.corrupt or 0)
      or r.per_second and string.format("%.4g pairs/s failed %d corrupt %d", r.per_second, r.failed or 0, r.corrupt or 0)
      or r.ratio and string.format("ratio %.3f", r.ratio) or r.fraction and string.format("served %.4f", r.fraction)
      or r.ms and string.format("%.4f ms", r.ms) or ""))
    rows:flush()
  end
  local res = survey.run(o)
  res.meta.peer_time_limit = limit
  write_json(out .. "/peers-" .. name .. ".json", res)
  rows:close()
  print(string.format("run %s: %d rows in %.1f s%s", name, #res.rows, cupola.clock() - t0,
    res.meta.cut_short and " (cut short)" or ""))
  return
end

if mode == "own" then
  local spec = allocator(name)
  size_cuda_heap(GPU and 16 * GiB or 64 * MiB)
  local threads, size = tonumber(arg[5]), tonumber(arg[6])
  local res = survey.run { allocators = { spec }, tests = { "thread" }, threads = threads, sizes = { size },
    iterations = 5, budget_ms = 5000, capacity = GPU and 8 * GiB or 256 * MiB }
  local r = res.rows[1]
  print(string.format("harness %s: %d allocations of %d B: alloc %.4f ms (%.4g /s), free %.4f ms, failed %d",
    name, threads, size, r.alloc_ms, threads / (r.alloc_ms / 1e3), r.free_ms, r.failed))
  return
end

-- The heap against each peer, per test and size: how many times faster the
-- heap is (pairs: pairs/s; per thread, per warp, mixed: alloc+free ms; the
-- synthetic workload: ms), "**ahead**" where the peer is; a row with NULLs
-- or corrupt blocks is marked.
local function standing(res)
  local by = {}
  local peers_seen, order = {}, {}
  for _, r in ipairs(res.rows) do
    local key = r.test .. "\0" .. tostring(r.size) .. "\0" .. (r.test == "pairs" and "" or tostring(r.threads))
    by[key] = by[key] or {}
    by[key][r.allocator] = r
    if r.allocator ~= "heap" and not r.allocator:match "^baseline" and not peers_seen[r.allocator] then
      peers_seen[r.allocator] = true
      order[#order + 1] = r.allocator
    end
  end
  local function cost(r)
    if r.test == "pairs" then return r.per_second and r.per_second > 0 and 1 / r.per_second end
    if r.alloc_ms then return r.alloc_ms + (r.free_ms or 0) end
    if r.test == "synth" or r.test == "synth_write" then return r.ms end
  end
  local out = { "### The heap against each peer: peer's time / heap's (above 1: the heap is ahead)", "",
    "| test | size | threads | " .. table.concat(order, " | ") .. " |",
    "| --- | ---: | ---: |" .. string.rep(" ---: |", #order) }
  local keys = {}
  for _, r in ipairs(res.rows) do
    local key = r.test .. "\0" .. tostring(r.size) .. "\0" .. (r.test == "pairs" and "" or tostring(r.threads))
    if r.allocator == "heap" and cost(r) and not keys[key] then
      keys[key] = true
      local h = by[key].heap
      local line = { r.test, tostring(r.size or ""), tostring(r.threads or "") }
      for _, a in ipairs(order) do
        local x = by[key][a]
        -- a pairs row may have been probed at fewer threads: compare rates
        local c = x and cost(x)
        if not c then
          line[#line + 1] = ""
        else
          local k = c / cost(h)
          local bad = (x.failed or 0) + (x.corrupt or 0) > 0 and " (NULLs/corrupt)" or ""
          line[#line + 1] = (k < 1 and "**ahead** " or "") .. string.format(k >= 10 and "%.0f" or "%.2f", k) .. bad
        end
      end
      out[#out + 1] = "| " .. table.concat(line, " | ") .. " |"
    end
  end
  return table.concat(out, "\n") .. "\n"
end

if mode == "merge" then
  local ok, dkjson = pcall(require, "dkjson")
  if not ok then error("merge needs dkjson (lua-dkjson)") end
  local res = { meta = nil, rows = {} }
  local missing, cut = {}, {}
  for _, a in ipairs(ALL) do
    local f = io.open(out .. "/peers-" .. a.name .. ".json")
    if f then
      local j = dkjson.decode(f:read "a")
      f:close()
      res.meta = res.meta or j.meta
      if j.meta.cut_short then cut[#cut + 1] = a.name end
      for _, r in ipairs(j.rows) do res.rows[#res.rows + 1] = r end
    else
      missing[#missing + 1] = a.name .. (present(a) and " (its run left no result: see its log)" or " (no checkout)")
    end
  end
  if not res.meta then error("no peers-*.json in " .. out) end
  res.meta.cut_short = #cut > 0 and ("the time limit of each allocator's run cut short: " .. table.concat(cut, ", ")) or nil
  local md = survey.markdown(res) .. "\n" .. standing(res)
  if #missing > 0 then md = md .. "\n- not measured: " .. table.concat(missing, "; ") .. "\n" end
  local f = assert(io.open(out .. "/device_peers-survey.md", "w"))
  f:write(md)
  f:close()
  survey.csv(res, out .. "/device_peers-survey.csv")
  survey.json(res, out .. "/device_peers-survey.json")
  survey.html(res, out .. "/device_peers-survey.html")
  print(md)
  return
end

error("unknown mode " .. mode)
