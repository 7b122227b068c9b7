-- bench/jax_truth.lua: the bfc pool against JAX's own recordings.
--
--   lua5.4 bench/jax_truth.lua DIR [REPS]
--
-- DIR holds what tests/jax/record_truth.py writes (NAME.jsonl.gz, the memory
-- events of every allocator, and NAME.json, memory_stats() after the run and
-- the setting); compacted files (examples/traces/jax, with memory_stats.lua)
-- work too.  Each recording is replayed under its own setting (growth or
-- preallocated, bytes_limit as JAX reported it) with its own addresses, and
-- the model's figures set beside JAX's: exact means every allocation's
-- address, chunk and bytes_in_use after it, peak_bytes_in_use and
-- peak_pool_bytes all JAX's.  Then the replay's speed: the best of REPS
-- (default 5) replays with the model's own addresses, in ns per event.
-- Prints a Markdown table (bench/results/bfc_model.md).
local cupola = require "cupola"

local dir = assert(arg[1], "usage: lua5.4 bench/jax_truth.lua DIR [REPS]")
local reps = tonumber(arg[2] or 5)

local function slurp(p)
  local f = io.open(p)
  if not f then return nil end
  local s = f:read "a"
  f:close()
  return s
end

-- JAX's figures: NAME.json (a recording), or memory_stats.lua (compacted)
local shipped = loadfile(dir .. "/memory_stats.lua")
shipped = shipped and shipped() or {}
local function figures(name)
  if shipped[name] then return shipped[name] end
  local js = assert(slurp(dir .. "/" .. name .. ".json"), name .. ".json missing")
  local function num(k) return tonumber(js:match('"' .. k .. '": (%d+)')) end
  return { setting = js:match '"setting": "(%a+)"', status = js:match '"status": "(%a+)"',
    bytes_limit = num "bytes_limit", peak_bytes_in_use = num "peak_bytes_in_use",
    peak_pool_bytes = num "peak_pool_bytes", num_allocs = num "num_allocs",
    fraction = js:match '"fraction": "([^"]*)"' }
end

local names = {}
for n in io.popen("ls " .. dir):lines() do
  local name = n:match "^(.*)%.jsonl%.gz$"
  if name then names[#names + 1] = name end
end
table.sort(names)

local function fmt(n) return tostring(n):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "") end

print("| recording | setting | status | events | exact | model peak_bytes_in_use | JAX's | model peak_pool_bytes | JAX's | regions | ns/event |")
print("| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
local all, exact_n, ns_sum, ev_sum = 0, 0, 0, 0
for _, name in ipairs(names) do
  local f = figures(name)
  local t <close> = cupola.trace.load(dir .. "/" .. name .. ".jsonl.gz")
  local grow = f.setting == "grow"
  local p <close> = cupola.pool { kind = "bfc", upstream = "virtual", memory_limit = f.bytes_limit,
    allow_growth = grow }
  local r = cupola.trace.replay(t, p, { addresses = "recorded" })
  local exact = r.failed == 0 and r.address_mismatches == 0 and r.chunk_mismatches == 0 and
      r.peak_allocated == f.peak_bytes_in_use and r.peak_reserved == f.peak_pool_bytes
  local best = math.huge
  for _ = 1, reps do
    local q <close> = cupola.pool { kind = "bfc", upstream = "virtual", memory_limit = f.bytes_limit,
      allow_growth = grow }
    local rr = cupola.trace.replay(t, q, { ["repeat"] = 20 })
    best = math.min(best, rr.ns_per_event)
  end
  all = all + 1
  exact_n = exact_n + (exact and 1 or 0)
  ns_sum, ev_sum = ns_sum + best * #t, ev_sum + #t
  local detail = exact and "yes" or string.format("no (%d addresses, %d chunks, %d refused)",
    r.address_mismatches, r.chunk_mismatches, r.failed)
  print(string.format("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %.1f |", name,
    grow and "growth" or "preallocated", f.status or "ok", fmt(#t), detail, fmt(r.peak_allocated),
    fmt(f.peak_bytes_in_use), fmt(r.peak_reserved), fmt(f.peak_pool_bytes), r.device_allocs, best))
end
print(string.format("\n%d of %d recordings exact; replay %.1f ns per event over all of them (best of %d, 20 repetitions each)",
  exact_n, all, ns_sum / ev_sum, reps))
