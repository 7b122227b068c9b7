-- bench/cupy_check.lua DIR [NAME...]: CuPy's own recordings (DIR/NAME.jsonl.gz,
-- the recording hook's log; DIR/NAME.debug.jsonl.gz, DebugPrintHook's; DIR/NAME.json,
-- CuPy's figures: tests/cupy/record_truth.py writes them) replayed through kind
-- "cupy" and held to CuPy: every cudaMalloc (count, sizes, order: the log's alloc
-- lines), the peak of total_bytes, total_bytes after every line, whether and where
-- it ran out.  Prints one row a recording and a replay, and the ns per event.
local cupola = require "cupola"
local dir = assert(arg[1], "usage: lua5.4 bench/cupy_check.lua DIR [NAME...]")

local function meta(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read "a"
  f:close()
  local m = {}
  m.limit = tonumber(s:match '"limit":%s*(%d+)')
  m.status = s:match '"status":%s*"(%a+)"'
  m.peak = tonumber(s:match '"peak_total_bytes":%s*(%d+)')
  m.end_total = tonumber(s:match '"end_total_bytes":%s*(%d+)')
  return m
end

local names = {}
if #arg > 1 then
  for i = 2, #arg do names[#names + 1] = arg[i] end
else
  local p = io.popen("ls " .. dir .. " | grep -v debug | sed -n 's/\\.jsonl\\.gz$//p'")
  for l in p:lines() do names[#names + 1] = l end
  p:close()
end

local function replay(t, m, addresses)
  local best
  for _ = 1, 5 do -- the fastest of five for ns per event
    local p <close> = cupola.pool { kind = "cupy", upstream = "virtual", max = m.limit }
    local r = cupola.trace.replay(t, p, { addresses = addresses, progress = false })
    local st = p:stats()
    r.end_total = st.total_bytes
    if not best or r.ns_per_event < best.ns_per_event then best = r end
  end
  return best
end

local function row(name, kind, t, m, r)
  local c = r.cupy
  local info = t:info()
  local ran_out = (r.oom_attempts - r.oom_served) > 0 or r.failed > 0
  local ok = c.exact and r.device_allocs == info.cupy.device_allocs and r.peak_reserved == m.peak and
      ran_out == (m.status == "oom")
  local where = c.mismatch and string.format("%s at line %d (model %d, log %d)", c.mismatch.what,
    c.mismatch.line, c.mismatch.model, c.mismatch.log) or ""
  if c.divergence then
    where = where .. string.format(" cudaMalloc %d (line %d): model %d, log %d", c.divergence.call,
      c.divergence.line, c.divergence.model, c.divergence.log)
  end
  print(string.format("%-28s %-8s %-5s mallocs %4d/%4d  peak %10d/%10d  oom %-3s/%-3s  %5.0f ns/ev  %s",
    name, kind, ok and "EXACT" or "DIFF", r.device_allocs, info.cupy.device_allocs, r.peak_reserved,
    m.peak or -1, ran_out and "yes" or "no", m.status == "oom" and "yes" or "no", r.ns_per_event, where))
  return ok
end

local nok, n = 0, 0
for _, name in ipairs(names) do
  local m = meta(dir .. "/" .. name .. ".json") or {}
  local t <close> = cupola.trace.load(dir .. "/" .. name .. ".jsonl.gz")
  for _, a in ipairs { "recorded", "model" } do
    n = n + 1
    if row(name, a, t, m, replay(t, m, a)) then nok = nok + 1 end
  end
  local dpath = dir .. "/" .. name .. ".debug.jsonl.gz"
  local f = io.open(dpath)
  if f then
    f:close()
    local td <close> = cupola.trace.load(dpath)
    n = n + 1
    if row(name, "debug", td, m, replay(td, m, "recorded")) then nok = nok + 1 end
  end
end
print(string.format("%d of %d replays exact", nok, n))
