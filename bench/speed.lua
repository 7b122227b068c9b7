-- bench/speed.lua (make bench): the binding's cost, each operation from Lua
-- beside the same operation from C (build/bench/speed, run in the same
-- invocation on the same backend), with the ratio and the aim.  The pool
-- pair is measured twice: with a Buffer (p:alloc(n, s):free()) and raw
-- (p:free_raw(p:alloc_raw(n, s)), an integer address); the C side of both is
-- the same cp_resource_alloc + cp_resource_free.
--   lua5.4 bench/speed.lua [scale]            (CUPOLA_BACKEND picks the backend)
-- Loops are written inline (no closure per iteration), so what is measured is
-- the calls themselves; medians of 7 repetitions after a warm-up, as in C.
-- The C and Lua sides alternate in ROUNDS rounds (C L C L ... C;
-- CUPOLA_BENCH_ROUNDS, default 3): each round's ratio takes the lower of the C
-- figures just before and just after its Lua figure, the table gives the
-- medians over the rounds and the range of the ratios, so that a machine
-- whose speed drifts between runs shows as a wide range, not as a verdict.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local K = cupola.kernels
local clock = cupola.clock

local scale = tonumber(arg and arg[1]) or tonumber(os.getenv "CUPOLA_BENCH_SCALE") or 1
local REPS = 7
local ROUNDS = math.max(1, math.tointeger(tonumber(os.getenv "CUPOLA_BENCH_ROUNDS") or 3) or 3)
local n_pair, n_async = math.floor(200000 * scale), math.floor(20000 * scale)
local n_launch, n_event = math.floor(500 * scale), math.floor(20000 * scale)
local backend = cupola.backend()

local function median(t)
  table.sort(t)
  return t[#t // 2 + 1]
end

-- Runs body(n) once to warm up, then REPS times; ns per iteration.
local function per_op(n, body, after)
  local t = {}
  for rep = 0, REPS do
    local t0 = clock()
    body(n)
    local dt = (clock() - t0) * 1e9 / n
    if after then after() end
    if rep > 0 then t[rep] = dt end
  end
  return median(t)
end

-- One run of the C side (build/bench/speed): its figures by name.
local exe = os.getenv "CUPOLA_BENCH_C" or "build/bench/speed"
local c_comments = {}
local function run_c()
  local C = {}
  local h = assert(io.popen(string.format("%s %s 2>&1", exe, scale)))
  local c_out = h:read "a"
  if not h:close() then error("bench/speed: the C side failed:\n" .. c_out) end
  for line in c_out:gmatch "[^\n]+" do
    local name, v = line:match "^(%S+) ([%d.]+) %a+$"
    if name then
      C[name] = tonumber(v)
    elseif #c_comments < 1 then
      c_comments[#c_comments + 1] = line
    end
  end
  return C
end

local s <close> = cupola.stream()
package.cpath = "build/?.so;" .. package.cpath
local has_floor, floor = pcall(require, "bench_floor")

-- One run of the Lua side: its figures by the C side's names.
local function run_lua()
  local L = {}

  do -- pool pair, virtual upstream
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", initial = "64MiB" }
    L.pool_pair_virtual = per_op(n_pair, function(n)
      for _ = 1, n do p:alloc(4096, s):free() end
    end)
  end
  do -- pool pair, device upstream
    local p <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "64MiB" }
    L.pool_pair_device = per_op(n_pair, function(n)
      for _ = 1, n do p:alloc(65536, s):free() end
    end)
  end
  do -- the raw pair (an integer address, no Buffer), both upstreams
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", initial = "64MiB" }
    L.raw_pair_virtual = per_op(n_pair, function(n)
      for _ = 1, n do p:free_raw(p:alloc_raw(4096, s)) end
    end)
    -- the pool's own pair from C inside this process (no binding): the raw
    -- pair is this, plus Lua's floor for its two calls, plus the binding
    local core = require "cupola.core"
    L.raw_pair_incore = per_op(n_pair, function(n) core._pair_repeat(p, n, 4096, s) end)
    local d <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "64MiB" }
    L.raw_pair_device = per_op(n_pair, function(n)
      for _ = 1, n do d:free_raw(d:alloc_raw(65536, s)) end
    end)
  end
  L.async_pair = per_op(n_async, function(n)
    for _ = 1, n do cupola.malloc_async(65536, s):free() end
  end, function() s:synchronize() end)
  do
    local small = cupola.malloc(1024 * 4)
    local opts = { stream = s }
    L.launch = per_op(n_launch, function(n)
      for _ = 1, n do K.sqrt_index(small, opts) end
    end, function() s:synchronize() end)
    -- the same with the options table built per call, as scripts write it
    L.launch_newopts = per_op(n_launch, function(n)
      for _ = 1, n do K.sqrt_index(small, { stream = s }) end
    end, function() s:synchronize() end)
    s:synchronize()
    small:free()
  end
  do
    local e <close> = cupola.event { timing = false }
    L.event_record_query = per_op(n_event, function(n)
      for _ = 1, n do e:record(s); e:query() end
    end, function() s:synchronize() end)
  end
  do -- the seed's loop, device time between events (as bench/speed.c)
    local e0 <close> = cupola.event()
    local e1 <close> = cupola.event()
    local size = (1 << 20) * 4
    local t = {}
    for rep = 0, REPS do
      e0:record(s)
      for _ = 1, 100 do
        local b = cupola.malloc_async(size, s)
        K.sqrt_index(b)
        b:free()
      end
      e1:record(s)
      e1:synchronize()
      if rep > 0 then t[rep] = e0:elapsed(e1) end
    end
    L.seed_loop = median(t)
  end

  -- Lua's own floor for the pair's shape (bench/floor.c), when built.
  if has_floor then
    for _, v in ipairs { "table", "gc", "cindex" } do
      local p = floor.pool(v)
      L["floor_" .. v] = per_op(n_pair, function(n)
        for _ = 1, n do p:alloc(4096, s):free() end
      end)
    end
    local p = floor.pool "raw"
    L.floor_raw = per_op(n_pair, function(n)
      for _ = 1, n do p:free_raw(p:alloc_raw(4096, s)) end
    end)
  end
  return L
end

local Cs, Ls = { [0] = run_c() }, {}
for r = 1, ROUNDS do
  Ls[r] = run_lua()
  Cs[r] = run_c()
end

local rows = {
  -- name, unit, Lua figure, C counterpart; aim: Lua/C at most; speedup: C/Lua (shown as "x faster"),
  -- aim_speedup: at least that, on the CUDA backend; ns_aim: the Lua figure at most, on the host backend
  { "pool alloc+free pair, tlsf, virtual upstream, 4 KiB", "ns", "pool_pair_virtual", "pool_pair_virtual" },
  { "raw pair, tlsf, virtual upstream, 4 KiB: p:free_raw(p:alloc_raw(n, s))", "ns", "raw_pair_virtual",
    "pool_pair_virtual", ns_aim = 150 },
  { "  the same pool's pair from C inside this Lua process (cupola.core._pair_repeat)", "ns", "raw_pair_incore",
    "pool_pair_virtual" },
  { "pool alloc+free pair, tlsf, device upstream, 64 KiB", "ns", "pool_pair_device", "pool_pair_device" },
  { "raw pair, tlsf, device upstream, 64 KiB", "ns", "raw_pair_device", "pool_pair_device" },
  { "Lua pool pair (device) vs cudaMallocAsync+cudaFreeAsync from C", "ns", "pool_pair_device", "async_pair",
    speedup = true },
  { "Lua raw pair (device) vs cudaMallocAsync+cudaFreeAsync from C", "ns", "raw_pair_device", "async_pair",
    speedup = true, aim_speedup = 4 },
  { "malloc_async+free pair, 64 KiB", "ns", "async_pair", "async_pair" },
  { "kernel launch, sqrt_index, opts table reused", "ns", "launch", "launch", aim = 1.10 },
  { "kernel launch, sqrt_index, {stream=s} per call", "ns", "launch_newopts", "launch", aim = 1.10 },
  { "event record+query", "ns", "event_record_query", "event_record_query", aim = 1.10 },
  { "seed loop, 100 x {alloc 4 MiB, sqrt_index, free}", "ms", "seed_loop", "seed_loop", aim = 1.05 },
}

if has_floor then
  table.insert(rows, 2, { "  floor: userdata, __index table, no __gc (bench/floor.c)", "ns", "floor_table",
    "pool_pair_virtual" })
  table.insert(rows, 3, { "  floor: userdata, __index table, __gc", "ns", "floor_gc", "pool_pair_virtual" })
  table.insert(rows, 4, { "  floor: userdata, C __index, __gc (cupola's shape)", "ns", "floor_cindex",
    "pool_pair_virtual" })
  table.insert(rows, 7, { "  floor: the raw pair's two calls, no allocator (bench/floor.c)", "ns", "floor_raw",
    "pool_pair_virtual" })
end

local d = cupola.device()
print(string.format("## make bench: backend %s (%s)", backend, d.name))
print("")
for _, l in ipairs(c_comments) do print("    " .. l) end
print("")
print(string.format("%d rounds, C and Lua alternated: Lua and C are medians over the rounds; ratio is the median of " ..
  "the rounds' own ratios (so not always Lua / C of the columns), range their lowest and highest.", ROUNDS))
print("")
print("| operation | Lua | C | ratio | range | aim |")
print("|---|---:|---:|---:|---:|---|")
local function fmt(v, unit)
  if unit == "ms" then return string.format("%.3f ms", v) end
  return string.format("%.0f ns", v)
end
local results = {}
for _, r in ipairs(rows) do
  local name, unit, lkey, ckey = r[1], r[2], r[3], r[4]
  local lvs, cvs, ratios = {}, {}, {}
  for k = 1, ROUNDS do
    local lv, cv = Ls[k][lkey], math.min(Cs[k - 1][ckey], Cs[k][ckey])
    lvs[k], cvs[k], ratios[k] = lv, cv, r.speedup and cv / lv or lv / cv
  end
  local lo, hi = math.min(table.unpack(ratios)), math.max(table.unpack(ratios))
  local lv, cv, ratio, aim = median(lvs), median(cvs), median(ratios), ""
  local range = ROUNDS > 1 and string.format("%.2f-%.2fx", lo, hi) or ""
  if r.speedup then
    if r.aim_speedup and backend == "cuda" then -- (the host backend's cudaMallocAsync is cupola's emulation)
      aim = string.format(">= %.0fx faster: %s", r.aim_speedup, ratio >= r.aim_speedup and "met" or "NOT met")
    end
    print(string.format("| %s | %s | %s | %.2fx faster | %s | %s |", name, fmt(lv, unit), fmt(cv, unit), ratio,
      range, aim))
  else
    if r.aim then aim = string.format("<= %.2fx: %s", r.aim, ratio <= r.aim and "met" or "NOT met") end
    if r.ns_aim and backend == "host" then
      aim = string.format("<= %d ns: %s", r.ns_aim, lv <= r.ns_aim and "met" or "NOT met")
    end
    print(string.format("| %s | %s | %s | %.2fx | %s | %s |", name, fmt(lv, unit), fmt(cv, unit), ratio, range, aim))
  end
  results[#results + 1] = { name = name, lua = lv, c = cv, ratio = ratio }
end
return results
