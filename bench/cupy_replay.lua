-- bench/cupy_replay.lua: the prediction beside the measurement for cupola's
-- pools inside CuPy.  For each cupola run of bench/cupy_inside.py (DIR/TAG.json
-- with its spec, DIR/TAG.csv: every request libcupola_cupy.so saw, in RMM's
-- CSV), replays the log through a fresh pool of the same spec over the
-- virtual upstream (the pool's accounting only) on the trace's clock, and
-- puts its peak reserved beside the peak the library measured on the device.
-- Markdown on stdout.
--
--   lua5.4 bench/cupy_replay.lua DIR [COMMIT] TAG...
local cupola = require "cupola"
local json_ok, dkjson = pcall(require, "dkjson")

local dir, commit = arg[1], arg[2] or "unknown"
assert(dir and arg[3], "usage: cupy_replay.lua DIR COMMIT TAG...")

-- the figures of one run (a flat JSON object of strings and numbers)
local function read_json(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read "a"
  f:close()
  if json_ok then return dkjson.decode(s) end
  local t = {}
  for k, v in s:gmatch '"([%w_]+)":%s*([^,}]+)' do
    t[k] = tonumber(v) or v:match '^"(.*)"$'
  end
  return t
end

-- CUPOLA_CUPY_POOL's syntax as cupola.pool options over the given upstream
local function pool_options(spec, upstream)
  local o = require("cupola.util").pool_spec(spec)
  o.upstream = upstream
  -- as libcupola_cupy.so makes it: the serving policy (src/core/pool/spec.c)
  return require("cupola.core").trace.serving(o)
end

local function mib(n) return n and ("%.1f MiB"):format(n / 2 ^ 20) or "-" end
local base = read_json(dir .. "/default.json") or {}
local out = {
  "# cupola's pools inside CuPy: measured and predicted peak reserved",
  "",
  ("CuPy %s. Commit %s, %s. CuPy's own MemoryPool reached %s (peak total_bytes, read after each step)."):format(
    base.cupy or "?", commit, os.date "!%Y-%m-%d %H:%MZ", mib(base.peak_reserved)),
  "",
  "| pool | requests | peak reserved, measured | replay of its log (virtual) | error | replay, streams idle | peak in use | device calls | maps / unmaps: measured, replayed | held frees |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
}
local worst = 0
for i = 3, #arg do
  local tag = arg[i]
  local fig = read_json(dir .. "/" .. tag .. ".json")
  if not fig then
    out[#out + 1] = ("| %s | run failed | | | | | | |"):format(tag)
  else
    local t <close> = cupola.trace.load(dir .. "/" .. tag .. ".csv")
    -- twice: the replay's streams as CUDA answers for them (an event just
    -- recorded is "not ready" for microseconds), and idle (every event
    -- complete at once, as advise replays)
    local function replay(idle)
      local p <close> = cupola.pool(pool_options(fig.spec, "virtual"))
      local r = t:replay(p, { clock = "trace", progress = false, idle_streams = idle })
      local st = p:stats()
      return r, st
    end
    local r, st = replay(false)
    local ri = replay(true)
    local err = (r.peak_reserved - fig.peak_reserved) / fig.peak_reserved * 100
    if math.abs(err) > worst then worst = math.abs(err) end
    local ms = fig.stats or {}
    local spec = fig.spec .. ((fig.launch_blocking or "") ~= "" and ", CUDA_LAUNCH_BLOCKING=" ..
      fig.launch_blocking or "")
    out[#out + 1] = ("| `%s` | %d | %s | %s | %+.3f %% | %s | %s | %d | %s / %s: %s / %s | %d |"):format(
      spec, #t // 2, mib(fig.peak_reserved), mib(r.peak_reserved), err, mib(ri.peak_reserved),
      mib(fig.used_peak), (fig.device_allocs or 0) + (fig.device_frees or 0),
      ms.maps or "-", ms.unmaps or "-", st.maps or "-", st.unmaps or "-", fig.held_frees or 0)
  end
end
out[#out + 1] = ""
out[#out + 1] = ("Largest prediction error: %.3f %% (aim: within 1 %%)."):format(worst)
print(table.concat(out, "\n"))
