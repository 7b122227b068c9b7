-- bench/run.lua: all benchmarks, written as one markdown report with the
-- device, the date and the commit.  Called by bench/gpu-check.sh.
--   lua5.4 bench/run.lua OUTDIR
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
cupola = require "cupola"
local out = arg[1] or "bench/results/tmp"
os.execute(string.format("mkdir -p %q", out))
local d = cupola.device()
local date = os.date "!%Y-%m-%d"
local commit = os.getenv "CUPOLA_COMMIT" or "unknown"

local lines = {}
local function put(s) lines[#lines + 1] = s; print(s) end
local function capture(script, ...)
  local saved = _G.print
  local buf = {}
  _G.print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    buf[#buf + 1] = table.concat(t, "\t")
  end
  _G.arg = { [0] = script, ... }
  local ok, res = pcall(dofile, script)
  _G.print = saved
  if not ok then buf[#buf + 1] = "FAILED: " .. tostring(res) end
  return table.concat(buf, "\n"), ok and res or nil
end

put(string.format("# cupola benchmarks: %s", d.name))
put("")
put(string.format("- device: %s, %s, %d SMs, cc %s, driver %d, runtime %d, backend %s",
  d.name, cupola.report.bytes(d.memory), d.sms, d.cc, d.driver, d.runtime, cupola.backend()))
put(string.format("- date: %s; commit: %s", date, commit))
put("")

put("## Seed 000: 100 x {alloc 4 MiB, sqrt_index, free}")
put("")
local seed_c = io.popen("build/bench/seed000 2>&1")
local c_out = seed_c and seed_c:read "a" or ""
if seed_c then seed_c:close() end
put("The same loop written in CUDA C (bench/seed000.cu):")
put("")
put("```")
put((c_out:gsub("%s+$", "")))
put("```")
put("")
put("From Lua (examples/stream_ordered_alloc.lua):")
put("")
local txt = capture("examples/stream_ordered_alloc.lua", "100")
put("```")
put(txt)
put("```")
put("")
put("## Alloc+free pair, host wall time")
put("")
put("```")
put((capture "bench/alloc_pairs.lua"))
put("```")
put("")
put("## Trace replay")
put("")
put("```")
put((capture "bench/replay.lua"))
put("```")

local name = string.format("%s/bench-%s.md", out, cupola.backend())
local f = assert(io.open(name, "w"))
f:write(table.concat(lines, "\n"), "\n")
f:close()
print("wrote " .. name)
