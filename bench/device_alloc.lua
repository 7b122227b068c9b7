-- bench/device_alloc.lua: allocation inside kernels, every allocator in one
-- run: throughput against the number of threads, alloc+free pairs by size,
-- the cost of verification, and the seed's kernel written in C beside it
-- (bench/device_alloc_seed.cu, built as build/bench/device_alloc_seed).
--   lua5.4 bench/device_alloc.lua [OUTFILE.md]
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local out = arg[1]
local d = cupola.device()
local GPU = cupola.backend() == "cuda"
local MiB = 1024 * 1024
local REPS = 5

local lines = {}
local function put(s) lines[#lines + 1] = s; print(s); io.stdout:flush() end

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- Median per_second of REPS runs after one warm-up; a reset before each
-- (on the run's own stream, so it is not timed).
-- Requests that fail (a pool too small for what is live at once) are
-- noted under the tables: a figure with failures is not a clean figure.
local notes = {}
local function measure(dp, opts)
  local per, res, failed = {}, nil, 0
  for rep = 0, REPS do
    dp:reset()
    res = dp:run(opts)
    failed = math.max(failed, res.failed)
    if rep > 0 then per[#per + 1] = res.per_second end
  end
  if failed > 0 then
    notes[#notes + 1] = string.format("%s, %d threads, %s B, free=%s: up to %d requests failed",
      dp.kind, opts.threads, tostring(opts.bytes), tostring(opts.free), failed)
  end
  return median(per), res
end
local function flush_notes()
  for _, n in ipairs(notes) do put("- " .. n) end
  if #notes > 0 then put("") end
  notes = {}
end

local function g(x) return string.format("%.3f", x / 1e9) end

put(string.format("# Allocation inside kernels: %s", d.name))
put("")
put(string.format("- device: %s, %d SMs, cc %s, driver %d, runtime %d, backend %s", d.name, d.sms,
  d.cc, d.driver, d.runtime, cupola.backend()))
put(string.format("- date: %s; commit: %s", os.date "!%Y-%m-%d %H:%M UTC", os.getenv "CUPOLA_COMMIT" or "unknown"))
put("- command: `lua5.4 bench/device_alloc.lua` (median of " .. REPS .. " runs after a warm-up; ms from events around the allocating kernel)")
put("")

local counts = GPU and { 1e4, 1e5, 1e6, 1e7 } or { 1e4, 1e5 }
local kinds = { "bump", "warp_bump", "slab", "malloc" }
put("## Throughput against threads, 16 B, verify=false")
put("")
put("Each thread allocates 16 B and writes its pattern over it; `alloc` keeps the blocks (G allocations/s),")
put("`alloc+free` frees each block in the same thread (G pairs/s).")
put("")
put("| allocator | threads | alloc G/s | alloc+free G pairs/s |")
put("| --- | ---: | ---: | ---: |")
local best = {}
for _, kind in ipairs(kinds) do
  -- 1 GiB: the first malloc pool sets CUDA's heap for the whole process
  local dp <close> = cupola.device_pool { kind = kind, capacity = 1024 * MiB }
  for _, n in ipairs(counts) do
    n = math.tointeger(n)
    if kind == "malloc" and n > 1e6 then break end -- ~2.5 M/s: 1e7 would take seconds per run
    local a = measure(dp, { threads = n, bytes = 16, verify = false })
    local f = measure(dp, { threads = n, bytes = 16, verify = false, free = true })
    best[kind] = math.max(best[kind] or 0, f)
    best[kind .. "_alloc"] = math.max(best[kind .. "_alloc"] or 0, a)
    put(string.format("| %s | %d | %s | %s |", kind, n, g(a), g(f)))
  end
end
put("")
flush_notes()

local big = math.tointeger(GPU and 1e7 or 1e5)
put(string.format("## slab alloc+free by size (%d threads) against CUDA's malloc (1e6 threads)", big))
put("")
put("| size | slab G pairs/s | malloc M pairs/s | slab / malloc |")
put("| ---: | ---: | ---: | ---: |")
do
  local slab <close> = cupola.device_pool { kind = "slab", capacity = 1024 * MiB }
  local mal <close> = cupola.device_pool { kind = "malloc", capacity = 1024 * MiB }
  for _, size in ipairs { 16, 32, 64, 256, 1024 } do
    local s = measure(slab, { threads = big, bytes = size, verify = false, free = true })
    local m = measure(mal, { threads = math.tointeger(GPU and 1e6 or 1e4), bytes = size, verify = false, free = true })
    put(string.format("| %d | %s | %.2f | %.0fx |", size, g(s), m / 1e6, s / m))
  end
end
put("")
flush_notes()

put("## What verification costs, and what it found (1e6 threads, 16..256 B, verify=true)")
put("")
put("| allocator | mode | ok | failed | overlaps | misaligned | ms |")
put("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
local vn = math.tointeger(GPU and 1e6 or 2e4)
for _, kind in ipairs(kinds) do
  local dp <close> = cupola.device_pool { kind = kind, capacity = 512 * MiB }
  for _, free in ipairs { false, true } do
    dp:reset()
    local r = dp:run { threads = vn, bytes = { 16, 256 }, free = free }
    put(string.format("| %s | %s | %d | %d | %d | %d | %.3f |", kind, free and "alloc+free" or "alloc",
      r.ok, r.failed, r.overlaps, r.misaligned, r.ms))
  end
end
put("")

if GPU then
  put("## Nested launches (children=256, 1e6 threads, 32 B)")
  put("")
  put("| allocator | mode | ok | failed | overlaps | launch errors | ms |")
  put("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
  for _, kind in ipairs { "bump", "warp_bump", "slab" } do
    local dp <close> = cupola.device_pool { kind = kind, capacity = 256 * MiB }
    for _, free in ipairs { false, true } do
      dp:reset()
      local r = dp:run { threads = 1000000, bytes = 32, children = 256, free = free }
      put(string.format("| %s | %s | %d | %d | %d | %d | %.3f |", kind, free and "alloc+free" or "alloc",
        r.ok, r.failed, r.overlaps, r.launch_errors, r.ms))
    end
  end
  put("")
end

put("## The seed's race: two streams, one pool, reset per launch (4096 threads x 256 B each, hold 20 ms, stream 2 starts 5 ms late)")
put("")
put("| setup | run A ok / overlaps | run B ok / overlaps | failed |")
put("| --- | --- | --- | ---: |")
do
  local s1 <close> = cupola.stream()
  local s2 <close> = cupola.stream()
  local shared <close> = cupola.device_pool { kind = "bump", capacity = 4 * MiB }
  local own <close> = cupola.device_pool { kind = "bump", capacity = 4 * MiB }
  local slab <close> = cupola.device_pool { kind = "slab", capacity = 4 * MiB }
  local ev = cupola.event()
  local function row(name, a, b)
    local base = { threads = 4096, bytes = 256, reset = true, hold_us = 20000 }
    for _, t in ipairs { a, b } do for k, v in pairs(base) do if t[k] == nil then t[k] = v end end end
    cupola.kernels.spin(5000, { stream = s2 }) -- b starts 5 ms late: its reset lands while a holds
    local r = cupola.run_concurrent { a, b }
    put(string.format("| %s | %d / %d | %d / %d | %d |", name, r[1].ok, r[1].overlaps, r[2].ok,
      r[2].overlaps, r[1].failed + r[2].failed))
  end
  row("shared bump pool (the seed)", { pool = shared, stream = s1 }, { pool = shared, stream = s2 })
  shared:reset()
  row("shared, no reset: lost space", { pool = shared, stream = s1, reset = false, threads = 12288 },
    { pool = shared, stream = s2, reset = false, threads = 12288 })
  row("per-stream pools", { pool = shared, stream = s1 }, { pool = own, stream = s2 })
  row("event ordering", { pool = shared, stream = s1, record = ev }, { pool = shared, stream = s2, wait = ev })
  row("slab, free=true, no reset", { pool = slab, stream = s1, reset = false, free = true },
    { pool = slab, stream = s2, reset = false, free = true })
end
put("")

local seed = io.popen("build/bench/device_alloc_seed 2>&1")
local text = seed and seed:read "a" or ""
if seed then seed:close() end
if text ~= "" then
  put("## The same kernels in CUDA C (bench/device_alloc_seed.cu)")
  put("")
  put("| kernel | threads | G/s |")
  put("| --- | ---: | ---: |")
  for name, n, per, rest in text:gmatch "(c_[%w_]+) (%d+) ([%d%.e%+]+)([^\n]*)" do
    put(string.format("| %s | %s | %s |%s", name, n, g(tonumber(per)), rest ~= "" and (" " .. rest) or ""))
  end
  put("")
end

put(string.format("Best: bump %s G allocs/s; warp_bump %s; slab %s G pairs/s; malloc %.2f M pairs/s; slab/malloc %.0fx.",
  g(best.bump_alloc or 0), g(best.warp_bump_alloc or 0), g(best.slab or 0), (best.malloc or 0) / 1e6,
  (best.slab or 0) / math.max(best.malloc or 1, 1)))

if out then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
