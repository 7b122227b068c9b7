-- check_nvtx.lua: proves that cupola's NVTX ranges reach a tool (make
-- test-nvtx; run on the GPU machine by bench/gpu-check.sh too).  Runs a
-- workload in a child process under tests/nvtx/nvtx_count.c (an NVTX
-- injection library, NVTX_INJECTION64_PATH) with CUPOLA_NVTX=1 and then
-- without it, and checks the counts the library wrote at exit.
--   lua5.4 tests/nvtx/check_nvtx.lua LIBRARY OUTDIR
if arg[1] == "child" then
  local cupola = require "cupola"
  cupola.nvtx.push "outer"
  cupola.nvtx.range("inner", function() cupola.nvtx.mark "here" end)
  cupola.nvtx.pop()
  local p <close> = cupola.pool { kind = "tlsf" }
  for _ = 1, 100 do
    local b = assert(p:alloc "64KiB")
    b:free()
  end
  local b <close> = assert(p:alloc "1MiB")
  for _ = 1, 10 do cupola.kernels.fill(b, 1.5) end
  for _ = 1, 5 do cupola.kernels.sqrt_index(b) end
  cupola.synchronize()
  print("backend " .. cupola.backend())
  os.exit(0)
end

local lib, out = arg[1], arg[2] or "build/nvtx"
local passed, failed = 0, 0
local function check(cond, what)
  if cond then passed = passed + 1 else failed = failed + 1 end
  print((cond and "ok " or "not ok ") .. (passed + failed) .. " - " .. what)
end

local function run(nvtx_on)
  local counts = out .. "/counts_" .. (nvtx_on and "on" or "off") .. ".txt"
  os.remove(counts)
  local cmd = string.format("NVTX_INJECTION64_PATH='%s' NVTX_COUNT_OUT='%s' CUPOLA_NVTX=%s %s '%s' child 2>&1",
    lib, counts, nvtx_on and "1" or "0", arg[-1] or "lua5.4", arg[0])
  local p = assert(io.popen(cmd))
  local log = p:read "a"
  p:close()
  local f = io.open(counts)
  if not f then return nil, log end
  local doms, ranges = {}, {}
  for line in f:lines() do
    local name, pu, po, ma, md, ub = line:match "^domain (%S+) pushes (%d+) pops (%d+) marks (%d+) max_depth (%d+) unbalanced (%d+)"
    if name then
      doms[name] = { pushes = tonumber(pu), pops = tonumber(po), marks = tonumber(ma),
        max_depth = tonumber(md), unbalanced = tonumber(ub) }
    end
    local d, m, n = line:match "^range (%S+) (.-) (%d+)$"
    if d then ranges[d .. ":" .. m] = tonumber(n) end
  end
  f:close()
  return { doms = doms, ranges = ranges, backend = log:match "backend (%a+)" }, log
end

local on, log = run(true)
check(on ~= nil, "the injection library was loaded and wrote its counts" .. (on and "" or (": " .. log)))
if on then
  local d, c = on.doms.default, on.doms.cupola
  check(d and d.pushes == 2 and d.pops == 2 and d.marks == 1 and d.max_depth == 2 and d.unbalanced == 0,
    string.format("user ranges (backend %s): default domain pushes %s, pops %s, marks %s, depth %s",
      tostring(on.backend), d and d.pushes, d and d.pops, d and d.marks, d and d.max_depth))
  check(on.ranges["default:outer"] == 1 and on.ranges["default:inner"] == 1, "user ranges named outer and inner")
  check(c and c.pushes == c.pops and c.unbalanced == 0 and c.pushes > 0,
    string.format("the cupola domain: pushes %s, pops %s, balanced", c and c.pushes, c and c.pops))
  check((on.ranges["cupola:alloc"] or 0) >= 101 and (on.ranges["cupola:free"] or 0) >= 100,
    string.format("pool operations as ranges: alloc %s, free %s", on.ranges["cupola:alloc"],
      on.ranges["cupola:free"]))
  check(on.ranges["cupola:launch fill"] == 10 and on.ranges["cupola:launch sqrt_index"] == 5,
    string.format("launches as ranges: fill %s, sqrt_index %s", on.ranges["cupola:launch fill"],
      on.ranges["cupola:launch sqrt_index"]))
end
local off = run(false)
check(off and off.doms.default and off.doms.default.pushes == 2 and not off.doms.cupola,
  "without CUPOLA_NVTX=1: the user's ranges only, no cupola domain")
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
