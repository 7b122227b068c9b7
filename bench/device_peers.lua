-- bench/device_peers.lua: cupola's heap beside the field's in-kernel
-- allocators (Gallatin, Ouroboros pages and chunks, FDGMalloc), each run
-- from the user's own checkout through its adapter (bench/peers/), in the
-- survey's benchmarks (cupola.survey).
--
--   lua5.4 bench/device_peers.lua PEERS OUTDIR list [variants]
--   lua5.4 bench/device_peers.lua PEERS OUTDIR warm NAME
--   lua5.4 bench/device_peers.lua PEERS OUTDIR drive NAME SECONDS
--   lua5.4 bench/device_peers.lua PEERS OUTDIR run NAME
--   lua5.4 bench/device_peers.lua PEERS OUTDIR own NAME THREADS SIZE
--   lua5.4 bench/device_peers.lua PEERS OUTDIR merge
--
-- PEERS is the folder holding the checkouts (gallatin/, ouroboros/,
-- survey/: see docs/API.md); a peer whose checkout is missing is left out
-- and the table says so.  NAME is an allocator of the table below (with
-- `variants`, list names the heap's variants too).
--   list   the names of the allocators whose checkouts are there, one a line
--   warm   compiles NAME's modules (nvcc: tens of seconds a peer) into the
--          cache, with a small pool: bench/device_peers.sh runs these side by
--          side before anything is timed
--   drive  every test of the comparison for NAME within SECONDS, each run in
--          a child process (`run`) watched from here: a child that faults
--          (its CUDA context is gone) or hangs past PEERS_MEASURE_LIMIT
--          seconds (default 30) in one measurement is ended, that
--          measurement becomes a `fault` row naming what happened, and a new
--          child goes on from the next measurement (after two faults in one
--          test, from the next test); OUTDIR/rows/NAME.jsonl holds every row
--   run    the plan in PEERS_PLAN ("test" or "test=size,size,..." joined by
--          ";"; default every test) for NAME in this process, each row
--          appended to OUTDIR/rows/NAME.jsonl as it is made and each
--          measurement named in OUTDIR/status/NAME as it starts; within
--          PEERS_TIME_LIMIT seconds (default 60)
--   own    the harness's figure beside a peer's own benchmark: NAME's
--          allocation of THREADS blocks of SIZE bytes (the survey's
--          per-thread test, that count and size alone); prints one line
--   merge  OUTDIR/rows/*.jsonl into one result: OUTDIR/device_peers-survey.
--          {md,csv,json,html} (one table per test, every allocator a column,
--          then each peer against the heap)
--   diag   one table line per row of OUTDIR/rows (a diagnostic run's)
--   events the counted heap variants' events per allocation, one table
--   short  a short table: the heap, its best variant, each peer against it
-- PEERS_SHORT=1 makes the comparison short (the exploration stage: fewer
-- sizes per test, a smaller budget per measurement); PEERS_SET="k=v;k=v"
-- sets survey options over the comparison's (v a number, a size such as
-- 8GiB, true, false, or numbers joined by commas); PEERS_LINEINFO=1 builds a
-- plugin with -lineinfo (compute-sanitizer names the lines); PEERS_CUDA_HEAP
-- sizes CUDA's heap for FDGMalloc (bytes).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local survey = require "cupola.survey"

local peers, out, mode, name = arg[1], arg[2], arg[3], arg[4]
if not (peers and out and mode) then
  io.stderr:write "usage: lua5.4 bench/device_peers.lua PEERS OUTDIR list|warm|drive|run|own|diag|events|short|merge [NAME ...]\n"
  os.exit(2)
end
local GiB, MiB = 2^30, 2^20
local GPU = cupola.backend() == "cuda"

local function isdir(p)
  local f = io.open(p .. "/.", "r")
  if f then f:close() return true end
  return false
end

local function json() return require "dkjson" end

-- What a peer cannot run, and why: the survey shows these as "n/a" with
-- the reason instead of running them.
local OURO_LIMITS = { max_size = 8192, reason = "above Ouroboros's largest page (8 KiB), which it passes to " ..
  "CUDA's malloc (its heap set to 500 MiB by Ouroboros::initialize): that is CUDA's allocator, not Ouroboros" }
local FDG_LIMITS = { tests = {
  pairs = "FDGMalloc frees nothing (a warp's memory goes back only all at once, which the survey does not call): " ..
    "a million pairs per launch hold a million blocks and their warps' headers",
  frag = "FDGMalloc frees nothing: each round's blocks come on top of the last's",
} }

-- The allocators, in the order of the table's columns.  FDGMalloc takes its
-- memory from CUDA's heap (sized per process, before any kernel runs) and
-- never frees a block: it goes last, compared on allocation alone.  The
-- heap's variants (alloc_heap.cuh, "Variants") run only when asked for.
local ALL = {
  { name = "heap", spec = { kind = "heap" } },
  { name = "Gallatin", dir = "gallatin/include",
    spec = { kind = "plugin", path = "bench/peers/gallatin.cu", compiler = "nvcc" } },
  { name = "Ouroboros-P", dir = "ouroboros/include", limits = OURO_LIMITS,
    spec = { kind = "plugin", path = "bench/peers/ouroboros.cu", compiler = "nvcc" } },
  { name = "Ouroboros-C", dir = "ouroboros/include", limits = OURO_LIMITS,
    spec = { kind = "plugin", path = "bench/peers/ouroboros.cu", compiler = "nvcc", options = { "-DOURO_CHUNKS" } } },
  { name = "FDGMalloc", dir = "survey/frameworks/fdg", limits = FDG_LIMITS, cuda_heap = true, alloc_only = true,
    spec = { kind = "plugin", path = "bench/peers/fdgmalloc.cu", compiler = "nvcc" } },
}
-- The heap's variants: each a module compiled with its -D options (the
-- pool is the same).  What each should change: bench/peers_explore.sh.
local VARIANTS = {
  { name = "heap-wide", options = { "-DCPD_HEAP_SLOTS_WIDE" } },
  { name = "heap-probe", options = { "-DCPD_HEAP_PROBE=4" } },
  { name = "heap-spread", options = { "-DCPD_HEAP_SPREAD_REFILL" } },
  { name = "heap-dense", options = { "-DCPD_HEAP_BULK_DENSE" } },
  { name = "heap-line", options = { "-DCPD_HEAP_TAKE_LINE" } },
  { name = "heap-stream", options = { "-DCPD_HEAP_STREAM" } },
  { name = "heap-stream+", options = { "-DCPD_HEAP_STREAM", "-DCPD_HEAP_SLOTS_WIDE", "-DCPD_HEAP_PROBE=4",
    "-DCPD_HEAP_TAKE_LINE" } },
  { name = "heap-counted", options = { "-DCPD_HEAP_COUNTERS" }, events = true },
  { name = "heap-stream-counted", options = { "-DCPD_HEAP_STREAM", "-DCPD_HEAP_COUNTERS" }, events = true },
}
for _, v in ipairs(VARIANTS) do
  ALL[#ALL + 1] = { name = v.name, variant = true, spec = { kind = "heap", options = v.options, events = v.events } }
end
-- PEERS_EXTRA=NAME=PATH: one more plugin (spec/peers_drive_spec.lua's
-- faulty one), run like the peers
do
  local n, path = (os.getenv "PEERS_EXTRA" or ""):match "^([^=]+)=(.+)$"
  if n then ALL[#ALL + 1] = { name = n, spec = { kind = "plugin", path = path } } end
end

local function entry(n)
  for _, a in ipairs(ALL) do
    if a.name == n then return a end
  end
  error("no allocator named " .. tostring(n))
end

local function allocator(n)
  local a = entry(n)
  local s = { name = a.name, limits = a.limits }
  for k, v in pairs(a.spec) do s[k] = v end
  if os.getenv "PEERS_LINEINFO" == "1" then
    s.options = { table.unpack(s.options or {}) }
    s.options[#s.options + 1] = "-lineinfo"
  end
  if a.dir then
    s.include = { peers .. "/" .. a.dir }
    s.plugin_name = a.name .. ".cu"
  end
  return s, a
end

local function present(a) return not a.dir or isdir(peers .. "/" .. a.dir) end

-- CUDA's in-kernel heap, for FDGMalloc: sized once per process before any
-- kernel calls malloc (cupola's "malloc" pool sets the limit), kept open
-- for the process.
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

local SHORT = os.getenv "PEERS_SHORT" == "1"

-- The comparison's options: the survey's own counts on the GPU (1e5
-- allocations a test, pairs at 1e6 threads), fewer repetitions and thread
-- counts than bench/device_survey.lua so that every allocator fits one
-- command.  The pairs run in a pool of their own, large enough for what
-- the resident threads hold at once at 64 KiB (on an H100 132 x 2048
-- threads: 17.7 GB), after a warm-up (one kernel allocating as many blocks
-- as threads can be resident, one freeing them: an allocator that builds
-- its structures on first use, Ouroboros's chunk locator, does so before
-- the timed kernels).
local function options(limit)
  local o = {
    capacity = GPU and 8 * GiB or 256 * MiB,
    frag_capacity = GPU and 2 * GiB or 64 * MiB,
    -- 1 GiB: Ouroboros's page variant keeps some 320 MiB of queues in its
    -- capacity (bench/device_survey.lua measures the heap at 256 MiB)
    oom_capacity = GPU and 1 * GiB or 16 * MiB,
    tests = { "init", "registers", "pairs", "thread", "warp", "mixed", "frag", "synth", "synth_write", "oom" },
    iterations = 3,
    budget_ms = 1000,
    threads = GPU and 100000 or 2000,
    warps = GPU and 10000 or 200,
    sizes = { 16, 64, 256, 1024, 4096, 8192 },
    mixed_ranges = { 64, 512, 4096, 8192 },
    pair_sizes = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536 },
    pair_threads = GPU and 1000000 or 5000,
    pair_capacity = GPU and 32 * GiB or 256 * MiB,
    pair_warm = true,
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
  if SHORT then
    o.budget_ms = 300
    o.pair_sizes = { 16, 64, 256, 1024, 4096, 8192, 65536 }
    o.synth_threads = GPU and { 32, 32768, 1048576 } or { 32, 1024 }
    o.synth_writes = GPU and 3 or 1
    o.oom_sizes = { 16, 4096, 65536 }
  end
  for k, v in (os.getenv "PEERS_SET" or ""):gmatch "([%w_]+)=([^;]*)" do
    if v == "true" or v == "false" then
      o[k] = v == "true"
    elseif v:find "," then
      o[k] = {}
      for x in v:gmatch "[^,]+" do o[k][#o[k] + 1] = tonumber(x) end
    else
      o[k] = tonumber(v) or v
    end
  end
  return o
end

-- The sizes a test goes through (nil: one measurement).
local function sizes_of(o, test)
  if test == "thread" or test == "warp" then return o.sizes end
  if test == "mixed" then return o.mixed_ranges end
  if test == "pairs" then return o.pair_sizes end
  if test == "frag" then return o.frag_sizes end
  if test == "oom" then return o.oom_sizes end
  if test == "synth" or test == "synth_write" then return o.synth_ranges end
  return nil
end

local function set_sizes(o, test, sizes)
  if test == "thread" or test == "warp" then o.sizes = sizes
  elseif test == "mixed" then o.mixed_ranges = sizes
  elseif test == "pairs" then o.pair_sizes = sizes
  elseif test == "frag" then o.frag_sizes = sizes
  elseif test == "oom" then o.oom_sizes = sizes
  elseif test == "synth" or test == "synth_write" then o.synth_ranges = sizes end
end

-- PEERS_PLAN: "test" or "test=s1,s2" joined by ";" -> {{test=, sizes=}...}.
local function parse_plan(text, o)
  local plan = {}
  for item in (text or ""):gmatch "[^;]+" do
    local t, list = item:match "^%s*([%w_]+)%s*=?%s*(.-)%s*$"
    local sizes
    if list and list ~= "" then
      sizes = {}
      for v in list:gmatch "[^,]+" do sizes[#sizes + 1] = tonumber(v) end
    end
    plan[#plan + 1] = { test = t, sizes = sizes }
  end
  if #plan == 0 then
    for _, t in ipairs(o.tests) do plan[#plan + 1] = { test = t } end
  end
  return plan
end

local function plan_text(plan)
  local t = {}
  for _, p in ipairs(plan) do
    t[#t + 1] = p.test .. (p.sizes and ("=" .. table.concat(p.sizes, ",")) or "")
  end
  return table.concat(t, ";")
end

local function write_file(path, text, how)
  local f = assert(io.open(path, how or "w"))
  f:write(text)
  f:close()
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read "a"
  f:close()
  return s
end

if mode == "list" then
  for _, a in ipairs(ALL) do
    if present(a) and (not a.variant or name == "variants") then print(a.name) end
  end
  return
end

if mode == "warm" then
  local spec = allocator(name)
  local t0 = cupola.clock()
  -- the pool's module, the host part and the survey's module, compiled
  local res = survey.run { allocators = { spec }, tests = { "registers" }, capacity = 1 * GiB }
  local r = res.rows[1] or {}
  print(string.format("warm %s: %.1f s, registers alloc %s free %s", name, cupola.clock() - t0,
    tostring(r.alloc_registers), tostring(r.free_registers)))
  return
end

-- A file name for an allocator's name.
local function fname(n) return (n:gsub("[^%w%-]", "_")) end

if mode == "run" then
  local spec, a = allocator(name)
  local limit = tonumber(os.getenv "PEERS_TIME_LIMIT") or 60
  local o = options(limit)
  local plan = parse_plan(os.getenv "PEERS_PLAN", o)
  local rows_path = out .. "/rows/" .. fname(name) .. ".jsonl"
  local status_path = out .. "/status/" .. fname(name)
  os.execute("mkdir -p '" .. out .. "/rows' '" .. out .. "/status'")
  if a.cuda_heap then
    -- FDGMalloc's memory is CUDA's heap: the out-of-memory test's capacity
    -- there, 16 GiB for the others (it frees nothing); PEERS_CUDA_HEAP bytes
    local oom_only = #plan == 1 and plan[1].test == "oom"
    size_cuda_heap(tonumber(os.getenv "PEERS_CUDA_HEAP") or
      (GPU and (oom_only and cupola.bytes(o.oom_capacity) or 16 * GiB) or 64 * MiB))
  end
  local t0 = cupola.clock()
  local n = 0
  for _, p in ipairs(plan) do
    local oo = options(math.max(1, limit - (cupola.clock() - t0)))
    oo.tests = { p.test }
    if p.sizes then set_sizes(oo, p.test, p.sizes) end
    oo.allocators = { spec }
    oo.starting = function(test, size, threads)
      write_file(status_path, string.format("start %s %s %s\n", test, tostring(size or "-"), tostring(threads or "-")))
    end
    oo.progress = function(r)
      if a.alloc_only then r.alloc_only = true end
      write_file(rows_path, json().encode(r) .. "\n", "a")
      n = n + 1
    end
    local res = survey.run(oo)
    if res.meta.cut_short then
      write_file(status_path, "cut " .. p.test .. "\n")
      break
    end
  end
  -- the run's description, once per allocator
  local d = cupola.device()
  write_file(out .. "/rows/" .. fname(name) .. ".meta.json", json().encode { device = d.name,
    backend = cupola.backend(), sms = d.sms, cc = d.cc, driver = d.driver, runtime = d.runtime,
    date = os.date "!%Y-%m-%d %H:%M UTC", commit = os.getenv "CUPOLA_COMMIT", iterations = o.iterations,
    budget_ms = o.budget_ms, capacity = o.capacity, oom_capacity = o.oom_capacity, pair_capacity = o.pair_capacity,
    timing = GPU and "CUDA events around each launch" or
      "the host backend: kernels run on the CPU, times are the CPU's" })
  write_file(status_path, "done\n")
  print(string.format("run %s: %d rows in %.1f s", name, n, cupola.clock() - t0))
  return
end

-- ---- drive: children that may fault -------------------------------------------

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function now()
  local p = io.popen "date +%s.%N"
  local v = tonumber(p:read "l")
  p:close()
  return v
end

-- What ended a child, from its log: the CUDA error, a trap, a signal.
local function fault_reason(log, rc, hung)
  if hung then return string.format("no end after %d s in this measurement (ended)", hung) end
  local e = log and (log:match "(cuda%w*Error%w*: [^%(\n]+)" or log:match "(CUDA_ERROR_%w+[^\n]*)")
  local what = e and e:gsub("%s+$", "") or nil
  if not what and log and log:find "Segmentation fault" then what = "segmentation fault" end
  if not what and log then
    what = log:match "lua5.4: ([^\n]+)" or log:match "([^\n]+)\n?$"
  end
  return string.format("%s (exit %s)", what or "no message", tostring(rc))
end

if mode == "drive" then
  local seconds = tonumber(arg[5]) or 120
  local cap = tonumber(os.getenv "PEERS_MEASURE_LIMIT") or 30
  local t0 = now()
  local o = options(seconds)
  local plan = parse_plan(os.getenv "PEERS_PLAN", o)
  local faults = {}
  local rows_path = out .. "/rows/" .. fname(name) .. ".jsonl"
  local status_path = out .. "/status/" .. fname(name)
  os.execute("mkdir -p " .. sh_quote(out .. "/rows") .. " " .. sh_quote(out .. "/status") .. " " ..
    sh_quote(out .. "/child"))
  os.remove(rows_path)
  local child = 0
  while #plan > 0 do
    local left = seconds - (now() - t0)
    if left < 5 then
      io.stderr:write(string.format("drive %s: no time left for %s\n", name, plan_text(plan)))
      break
    end
    child = child + 1
    local base = out .. "/child/" .. fname(name) .. "." .. child
    os.remove(status_path)
    -- the child runs in the background; its pid and exit status in files
    local cmd = string.format("PEERS_PLAN=%s PEERS_TIME_LIMIT=%d lua5.4 bench/device_peers.lua %s %s run %s",
      sh_quote(plan_text(plan)), math.floor(left), sh_quote(peers), sh_quote(out), sh_quote(name))
    os.execute(string.format("sh -c %s &", sh_quote(string.format("%s >%s 2>&1 & echo $! >%s; wait $!; echo $? >%s",
      cmd, sh_quote(base .. ".log"), sh_quote(base .. ".pid"), sh_quote(base .. ".rc")))))
    local pid, last, seen_at, hung
    while true do
      os.execute "sleep 0.2"
      pid = pid or tonumber(read_file(base .. ".pid") or "")
      if read_file(base .. ".rc") then break end
      local st = read_file(status_path)
      if st ~= last then last, seen_at = st, now() end
      local over = (seen_at and now() - seen_at > cap) or now() - t0 > seconds + 10
      if pid and over and not hung then
        hung = math.floor(now() - (seen_at or t0))
        os.execute("kill -TERM " .. pid .. " 2>/dev/null")
        os.execute "sleep 2"
        os.execute("kill -KILL " .. pid .. " 2>/dev/null")
      end
    end
    local rc = tonumber(read_file(base .. ".rc") or "") or -1
    local st = read_file(status_path) or ""
    io.stderr:write(string.format("drive %s: child %d exit %d: %s", name, child, rc, st ~= "" and st or "(no status)\n"))
    if rc == 0 and st:match "^done" then break end
    if st:match "^cut" then break end
    -- the measurement it was in: a fault row, and the plan from the next
    local test, size, threads = st:match "^start (%S+) (%S+) (%S+)"
    if not test then
      -- it ended before its first measurement: the whole plan's first test
      test = plan[1].test
    end
    size, threads = tonumber(size), tonumber(threads)
    local log = read_file(base .. ".log")
    local reason = fault_reason(log, rc, hung)
    write_file(rows_path, json().encode { test = test, allocator = name, size = size, threads = threads,
      fault = reason, capacity = test == "oom" and o.oom_capacity or nil } .. "\n", "a")
    faults[test] = (faults[test] or 0) + 1
    -- drop what was done and the measurement that faulted
    while #plan > 0 and plan[1].test ~= test do table.remove(plan, 1) end
    if #plan > 0 then
      local p = plan[1]
      local all = p.sizes or sizes_of(o, test)
      local rest = {}
      if all and size and faults[test] < 2 then
        local after = false
        for _, v in ipairs(all) do
          if after then rest[#rest + 1] = v end
          if v == size then after = true end
        end
      end
      if #rest > 0 then p.sizes = rest else table.remove(plan, 1) end
      if faults[test] >= 2 and #rest == 0 and all then
        local skipped = {}
        local after = false
        for _, v in ipairs(all) do
          if after then skipped[#skipped + 1] = v end
          if v == size then after = true end
        end
        for _, v in ipairs(skipped) do
          write_file(rows_path, json().encode { test = test, allocator = name, size = v, threads = threads,
            skipped = "not run after two faults in this test" } .. "\n", "a")
        end
      end
    end
  end
  print(string.format("drive %s: %d child process(es), %.0f s", name, child, now() - t0))
  return
end

if mode == "own" then
  local spec = allocator(name)
  if entry(name).cuda_heap then size_cuda_heap(GPU and 16 * GiB or 64 * MiB) end
  local threads, size = tonumber(arg[5]), tonumber(arg[6])
  local res = survey.run { allocators = { spec }, tests = { "thread" }, threads = threads, sizes = { size },
    iterations = 5, budget_ms = 5000, capacity = GPU and 8 * GiB or 256 * MiB }
  local r = res.rows[1]
  print(string.format("harness %s: %d allocations of %d B: alloc %.4f ms (%.4g /s), free %.4f ms, failed %d",
    name, threads, size, r.alloc_ms, threads / (r.alloc_ms / 1e3), r.free_ms, r.failed))
  return
end

-- ---- diag: what the exploration's diagnostic runs found ----------------------------

-- One line a measurement of OUTDIR/rows/*.jsonl (a diagnostic run's): its
-- figures, each pairs probe's NULLs and corrupt blocks, or its fault.
if mode == "diag" then
  local label = name or out
  for _, a in ipairs(ALL) do
    local text = read_file(out .. "/rows/" .. fname(a.name) .. ".jsonl")
    for line in (text or ""):gmatch "[^\n]+" do
      local r = json().decode(line)
      if r and r.test ~= "init" and r.test ~= "registers" then
        local what
        if r.fault then
          what = "fault: " .. r.fault
        elseif r.skipped then
          what = "n/a: " .. r.skipped
        elseif r.test == "pairs" then
          local p = {}
          for _, x in ipairs(r.probes or {}) do
            p[#p + 1] = string.format("%d threads %.3f ms %d NULL %d corrupt", x.threads, x.ms, x.failed, x.corrupt)
          end
          what = string.format("%.4g pairs/s, %d NULL, %d corrupt%s%s", r.per_second or 0, r.failed or 0,
            r.corrupt or 0, #p > 0 and "; probes: " .. table.concat(p, ", ") or "", r.warm and "" or " (cold)")
        elseif r.alloc_ms then
          what = string.format("alloc %.4f free %.4f ms, %d NULL, %d corrupt", r.alloc_ms, r.free_ms or 0,
            r.failed or 0, r.corrupt or 0)
        else
          what = r.ratio and string.format("ratio %.3f", r.ratio) or r.fraction and
            string.format("served %.4f", r.fraction) or ""
        end
        print(string.format("| %s | %s | %s | %s | %s | %s |", label, r.allocator, r.test, tostring(r.size or ""),
          tostring(r.threads or ""), what))
      end
    end
  end
  return
end

-- The counted variants' events per allocation (rows with `events`), one
-- markdown table.
if mode == "events" then
  local keys = { "take_tries", "reserve_miss", "busy", "probes", "refills", "refill_cached", "map_tries", "map_words",
    "bulk", "borrow", "stream", "stream_wait", "installs", "prepared" }
  print("| allocator | test | size | threads | " .. table.concat(keys, " | ") .. " |")
  print("| --- | --- | ---: | ---: |" .. string.rep(" ---: |", #keys))
  for _, a in ipairs(ALL) do
    local text = read_file(out .. "/rows/" .. fname(a.name) .. ".jsonl")
    for line in (text or ""):gmatch "[^\n]+" do
      local r = json().decode(line)
      if r and r.events then
        local cells = {}
        for i, k in ipairs(keys) do cells[i] = string.format("%.3g", r.events[k] or 0) end
        print(string.format("| %s | %s | %s | %s | %s |", r.allocator, r.test, tostring(r.size), tostring(r.threads),
          table.concat(cells, " | ")))
      end
    end
  end
  return
end

-- ---- merge -------------------------------------------------------------------------

-- The cost of a row for the comparison (smaller is better): pairs 1/rate;
-- per thread, per warp, mixed: alloc + free ms (alloc alone for an
-- allocator compared on allocation alone); the synthetic workload: ms.
local function cost(r)
  if r.skipped or r.fault then return nil end
  if r.test == "pairs" then return r.per_second and r.per_second > 0 and 1 / r.per_second end
  if r.alloc_ms then return r.alloc_ms + (r.alloc_only and 0 or (r.free_ms or 0)) end
  if r.test == "synth" or r.test == "synth_write" then return r.ms end
end

-- The heap's worst (slowest of its runs) against the peer's best, where
-- the rows carry them: pairs ms_max / ms_min, the others _max / _min.
local function worst_best(h, x)
  if h.test == "pairs" then
    if h.ms_max and x.ms_min and h.ms_max > 0 then return (x.ms_min * h.threads / x.threads) / h.ms_max end
    return nil
  end
  if h.alloc_ms_max and x.alloc_ms_min then
    local hc = h.alloc_ms_max + (x.alloc_only and 0 or (h.free_ms_max or 0))
    local xc = x.alloc_ms_min + (x.alloc_only and 0 or (x.free_ms_min or 0))
    return xc / hc
  end
  if h.ms_max and x.ms_min then return x.ms_min / h.ms_max end
end

-- The heap (or the allocator named base) against each other allocator, per
-- test and size: how many times faster it is (the peer's cost / the
-- heap's; below 1 the peer is ahead: **behind**), the heap's slowest run
-- against the peer's fastest in brackets where the rows carry both.
local function standing(res, base)
  base = base or "heap"
  local by, order, seen = {}, {}, {}
  local function key(r)
    return r.test .. "\0" .. tostring(r.size) .. "\0" .. ((r.test == "pairs" or r.test == "frag") and "" or
      tostring(r.threads))
  end
  for _, r in ipairs(res.rows) do
    local k = key(r)
    by[k] = by[k] or {}
    by[k][r.allocator] = r
    if r.allocator ~= base and not r.allocator:match "^baseline" and not seen[r.allocator] then
      seen[r.allocator] = true
      order[#order + 1] = r.allocator
    end
  end
  local out = { string.format("### %s against each allocator: its time / %s's (below 1: %s is behind); " ..
    "[%s's slowest run against its fastest]; fragmentation: its ratio / %s's", base, base, base, base, base), "",
    "| test | size | threads | " .. table.concat(order, " | ") .. " |",
    "| --- | ---: | ---: |" .. string.rep(" ---: |", #order) }
  local done = {}
  for _, r in ipairs(res.rows) do
    local k = key(r)
    if r.allocator == base and not done[k] and (cost(r) or r.test == "frag") then
      done[k] = true
      local h = by[k][base]
      local line = { r.test, tostring(r.size or ""), tostring(r.threads or "") }
      for _, a in ipairs(order) do
        local x = by[k][a]
        local cell = ""
        if x and x.fault then
          cell = "fault"
        elseif x and x.skipped then
          cell = "n/a"
        elseif x and r.test == "frag" and x.ratio and h.ratio and h.ratio > 0 then
          cell = string.format("%.2f", x.ratio / h.ratio)
        elseif x and cost(x) and cost(h) then
          local kk = cost(x) / cost(h)
          local wb = worst_best(h, x)
          local bad = ((x.failed or 0) + (x.corrupt or 0) > 0) and " (NULLs/corrupt)" or ""
          cell = (kk < 1 and "**behind** " or "") .. string.format(kk >= 10 and "%.0f" or "%.2f", kk) ..
            (wb and string.format(" [%.2f]", wb) or "") .. (x.alloc_only and " (alloc)" or "") .. bad
        end
        line[#line + 1] = cell
      end
      out[#out + 1] = "| " .. table.concat(line, " | ") .. " |"
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- Every row under OUTDIR/rows, in the order of ALL.
local function load_rows()
  local res = { rows = {} }
  local missing = {}
  for _, a in ipairs(ALL) do
    local text = read_file(out .. "/rows/" .. fname(a.name) .. ".jsonl")
    if text then
      local meta = read_file(out .. "/rows/" .. fname(a.name) .. ".meta.json")
      if meta and not res.meta then res.meta = json().decode(meta) end
      for line in text:gmatch "[^\n]+" do
        local r = json().decode(line)
        if r then res.rows[#res.rows + 1] = r end
      end
    elseif not a.variant and a.dir then
      missing[#missing + 1] = a.name .. (not present(a) and " (no checkout)" or not GPU and
        " (the host backend runs the heap alone)" or " (its run left no rows: see its log)")
    end
  end
  res.meta = res.meta or { device = "?", backend = cupola.backend(), date = os.date "!%Y-%m-%d %H:%M UTC",
    timing = "?" }
  return res, missing
end

-- A short table (the exploration's last words): per test and size the
-- heap's figure, the variant that did best and by how much (the heap's
-- cost / its), and each peer's cost / the heap's (above 1: the heap is
-- ahead); fragmentation and out of memory as their own figures.
if mode == "short" then
  local res = load_rows()
  local by, keys, peers_order, seen = {}, {}, {}, {}
  for _, r in ipairs(res.rows) do
    local k = r.test .. " " .. tostring(r.size) .. ((r.test == "synth" or r.test == "synth_write") and
      (" " .. tostring(r.threads)) or "")
    if not by[k] then by[k] = {}; keys[#keys + 1] = k end
    by[k][r.allocator] = r
    local ok, a = pcall(entry, r.allocator)
    if ok and not a.variant and r.allocator ~= "heap" and not seen[r.allocator] then
      seen[r.allocator] = true
      peers_order[#peers_order + 1] = r.allocator
    end
  end
  local function fig(r)
    if not r then return "" end
    if r.fault then return "fault" end
    if r.skipped then return "n/a" end
    if r.test == "frag" then return string.format("%.2f", r.ratio or 0) end
    if r.test == "oom" then return string.format("%.0f%%", 100 * (r.fraction or 0)) end
    if r.test == "pairs" then return string.format("%.2fG/s", (r.per_second or 0) / 1e9) end
    local c = cost(r)
    return c and string.format("%.4f", c) or ""
  end
  local head = #peers_order > 0 and (" " .. table.concat(peers_order, " | ") .. " |") or ""
  print("| test size | heap | best variant |" .. head)
  print("| --- | ---: | --- |" .. string.rep(" ---: |", #peers_order))
  for _, k in ipairs(keys) do
    local t = by[k]
    local h = t.heap
    if h and h.test ~= "init" and h.test ~= "registers" then
      local best, bv
      for name, r in pairs(t) do
        local ok, a = pcall(entry, name)
        if ok and a.variant and not name:find "counted" then
          local v = r.test == "frag" and r.ratio or r.test == "oom" and r.fraction and -r.fraction or cost(r)
          if v and (not bv or v < bv) then best, bv = name, v end
        end
      end
      local bcell = ""
      if best then
        local hv = h.test == "frag" and h.ratio or h.test == "oom" and h.fraction and -h.fraction or cost(h)
        bcell = best:gsub("^heap%-", "") .. " " .. ((h.test == "frag" or h.test == "oom") and fig(t[best]) or
          (hv and bv and bv > 0 and string.format("x%.2f", hv / bv) or ""))
      end
      local cells = {}
      for i, a in ipairs(peers_order) do
        local x = t[a]
        if x and not x.fault and not x.skipped and h.test ~= "frag" and h.test ~= "oom" and cost(x) and cost(h) then
          cells[i] = string.format("%.2f", cost(x) / cost(h)) .. ((x.failed or 0) + (x.corrupt or 0) > 0 and "!" or "")
        else
          cells[i] = fig(x)
        end
      end
      print(string.format("| %s | %s | %s |%s", k, fig(h), bcell,
        #cells > 0 and (" " .. table.concat(cells, " | ") .. " |") or ""))
    end
  end
  return
end

if mode == "merge" then
  local res, missing = load_rows()
  if #res.rows == 0 then error("no rows in " .. out .. "/rows") end
  local md = survey.markdown(res) .. "\n" .. standing(res)
  local notes, ran = {}, {}
  for _, r in ipairs(res.rows) do ran[r.allocator] = true end
  for _, a in ipairs(ALL) do
    if a.alloc_only and ran[a.name] then
      notes[#notes + 1] = a.name .. " is compared on allocation alone (its free does nothing)"
    end
  end
  if #notes > 0 then md = md .. "\n- " .. table.concat(notes, "; ") .. "\n" end
  if #missing > 0 then md = md .. "\n- not measured: " .. table.concat(missing, "; ") .. "\n" end
  write_file(out .. "/device_peers-survey.md", md)
  survey.csv(res, out .. "/device_peers-survey.csv")
  survey.json(res, out .. "/device_peers-survey.json")
  survey.html(res, out .. "/device_peers-survey.html")
  print(md)
  return
end

error("unknown mode " .. mode)
