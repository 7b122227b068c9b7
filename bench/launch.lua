-- bench/launch.lua: the cost of launching a kernel of your own.
--   lua5.4 bench/launch.lua [N]        (from the repository root; N launches per repetition)
-- Side by side in one run:
--   * cuLaunchKernel of an NVRTC-compiled empty kernel from C (build/bench/launch,
--     `make build/bench/launch`), and k:launch of the same kernel from Lua,
--     back to back on the legacy default stream and on a created stream
--     (median of 7 repetitions of N launches, ns per launch);
--   * NVRTC (or, on the host backend, the C++ compiler) compiling a module in
--     a script's first run and its second run (the disk cache), each in a
--     fresh process;
--   * the host backend: an empty one-block launch (enqueue; and launch +
--     synchronize), and a 1024-block grid spread over the CPU pool.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local N = tonumber(arg and arg[1]) or 20000

local EMPTY = 'extern "C" __global__ void empty(void) {}\n'

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local function lua_launches(k, opts, n)
  local t = {}
  for rep = 1, 7 do
    cupola.synchronize()
    local t0 = cupola.clock()
    for _ = 1, n do k:launch(opts) end
    t[rep] = (cupola.clock() - t0) / n * 1e9
    cupola.synchronize()
  end
  return median(t)
end

local function child(env, script)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(string.format("package.path = %q .. package.path\npackage.cpath = %q .. package.cpath\n",
    "lua/?.lua;lua/?/init.lua;", "build/?.so;"))
  f:write(script)
  f:close()
  local p = io.popen(string.format("%s lua5.4 %s 2>&1", env, path))
  local out = p:read "a"
  p:close()
  os.remove(path)
  return out
end

local d = cupola.device()
print(string.format("# launch cost: %s (%s backend), %s", d.name, cupola.backend(), os.date "!%Y-%m-%d"))
print("")

if cupola.backend() == "cuda" then
  -- The C program and the Lua loops alternate in ROUNDS rounds (C L C L ...
  -- C); each Lua figure is set against the lower of the C runs around it,
  -- and the table gives the medians over the rounds and the range of the
  -- ratios (the host CPU's speed drifts between runs).
  local ROUNDS = math.max(1, math.tointeger(tonumber(os.getenv "CUPOLA_BENCH_ROUNDS") or 3) or 3)
  local function run_c()
    local c = {}
    local p = io.popen("build/bench/launch " .. N .. " 2>&1")
    for line in p:lines() do
      local k, v = line:match "^(%S+) (%S+)$"
      if k then c[k] = tonumber(v) else print("launch.c: " .. line) end
    end
    p:close()
    return c
  end
  local m = cupola.module { source = EMPTY, name = "empty.cu" }
  local k = m:kernel("empty", {})
  local s = cupola.stream()
  local legacy_opts, stream_opts = { grid = 1, block = 1 }, { grid = 1, block = 1, stream = s }
  lua_launches(k, legacy_opts, 2000)
  local function run_lua()
    local l = { legacy = lua_launches(k, legacy_opts, N), stream = lua_launches(k, stream_opts, N) }
    -- the same with a new options table per launch, as a loop written inline would
    local t = {}
    for rep = 1, 7 do
      cupola.synchronize()
      local t0 = cupola.clock()
      for _ = 1, N do k:launch({ grid = 1, block = 1 }) end
      t[rep] = (cupola.clock() - t0) / N * 1e9
    end
    l.inline = median(t)
    return l
  end
  local cs, ls = { [0] = run_c() }, {}
  for r = 1, ROUNDS do
    ls[r] = run_lua()
    cs[r] = run_c()
  end
  -- per round: C (the lower of the runs around it), Lua, and their ratio
  local function figures(ckey, lkey)
    local cv, lv, ratio = {}, {}, {}
    for r = 1, ROUNDS do
      local a, b = cs[r - 1][ckey], cs[r][ckey]
      cv[r] = a and b and math.min(a, b) or a or b
      lv[r] = ls[r][lkey]
      ratio[r] = cv[r] and lv[r] / cv[r]
    end
    return cv, lv, ratio
  end
  local c = { launch_ns_legacy_rt = cs[ROUNDS].launch_ns_legacy_rt, nvrtc_ms = cs[ROUNDS].nvrtc_ms }
  local lua_legacy = median(({ figures("launch_ns_legacy", "legacy") })[2])
  -- the same launches repeated from C inside cupola: the core's and the
  -- driver's share, without the binding's
  local rep = {}
  for r = 1, 7 do
    cupola.synchronize()
    rep[r] = require("cupola.core")._launch_repeat(k, legacy_opts, N) / N * 1e9
  end
  cupola.synchronize()
  local core_legacy = median(rep)
  print(string.format("%d rounds, C and Lua alternated: C and Lua are medians over the rounds; Lua / C is the " ..
    "median of the rounds' own ratios (so not always the columns' quotient), range their lowest and highest.",
    ROUNDS))
  print("")
  print("| empty kernel, back to back | C cuLaunchKernel (ns) | Lua k:launch (ns) | Lua / C | range |")
  print("| --- | --- | --- | --- | --- |")
  local function row(name, ckey, lkey)
    local cv, lv, ratio = figures(ckey, lkey)
    local n = 0
    for r = 1, ROUNDS do if ratio[r] then n = n + 1 end end
    if n < ROUNDS then
      print(string.format("| %s | n/a | %.0f | n/a | |", name, median(lv)))
      return
    end
    local lo, hi = math.min(table.unpack(ratio)), math.max(table.unpack(ratio))
    print(string.format("| %s | %.0f | %.0f | %.2fx | %.2f-%.2fx |", name, median(cv), median(lv),
      median(ratio), lo, hi))
  end
  row("legacy default stream", "launch_ns_legacy", "legacy")
  row("created stream", "launch_ns_stream", "stream")
  row("legacy stream, options table built per launch", "launch_ns_legacy", "inline")
  c.launch_ns_legacy = median(({ figures("launch_ns_legacy", "legacy") })[1])
  print("")
  print(string.format("Where the time goes (legacy stream, ns per launch): C program %s; the same C program once " ..
    "cudart has attached and with a parameter array %s; cupola's core from C (cupola._launch_repeat, no " ..
    "binding) %.0f; Lua k:launch %.0f (so the binding costs %.0f).",
    tostring(c.launch_ns_legacy), tostring(c.launch_ns_legacy_rt), core_legacy, lua_legacy, lua_legacy - core_legacy))
  if c.nvrtc_ms then print(string.format("NVRTC, empty module, from C (no cache): %.1f ms", c.nvrtc_ms)) end
end

-- compile: first run and second run of a script, each a new process
do
  local dir = os.tmpname()
  os.remove(dir)
  local src = [[
#include <cupola/device.h>
extern "C" __global__ void axpy(float *y, const float *x, float a, unsigned long long n)
{
    for (unsigned long long i = cupola_global_index(); i < n; i += cupola_grid_size())
        y[i] += a * x[i];
}
]] .. "// " .. os.time() .. "\n"
  local script = string.format([[
    local cupola = require "cupola"
    local t0 = cupola.clock()
    local m = cupola.module { source = %q, name = "axpy.cu" }
    io.write(m.code, " ", string.format("%%.2f", (cupola.clock() - t0) * 1e3), "\n")
  ]], src)
  local env = "CUPOLA_CACHE_DIR=" .. dir
  local first = child(env, script)
  local second = child(env, script)
  print(string.format("compile of a small module (%s backend), first run: %s", cupola.backend(),
    first:gsub("\n", "") .. " ms"))
  print(string.format("compile of a small module (%s backend), second run: %s", cupola.backend(),
    second:gsub("\n", "") .. " ms"))
  os.execute("rm -rf " .. dir)
end

-- the host backend, in a child (this process may be on CUDA)
print("")
print(((child("CUPOLA_BACKEND=host", string.format([[
  local cupola = require "cupola"
  local N = %d
  local m = cupola.module { source = %q, name = "empty.cu" }
  local k = m:kernel("empty", {})
  local o = { grid = 1, block = 1 }
  local function median(t) table.sort(t) return t[(#t + 1) // 2] end
  for _ = 1, 2000 do k:launch(o) end
  cupola.synchronize()
  local t, u = {}, {}
  for rep = 1, 7 do
    local t0 = cupola.clock()
    for _ = 1, N do k:launch(o) end
    cupola.synchronize()
    t[rep] = (cupola.clock() - t0) / N * 1e6
    t0 = cupola.clock()
    for _ = 1, N // 10 do k:launch(o); cupola.synchronize() end
    u[rep] = (cupola.clock() - t0) / (N // 10) * 1e6
  end
  local g = {}
  local big = { grid = 1024, block = 256 }
  for rep = 1, 5 do
    local t0 = cupola.clock()
    k:launch(big)
    cupola.synchronize()
    g[rep] = (cupola.clock() - t0) * 1e3
  end
  io.write(string.format("host backend, empty kernel, one block of one thread: %%.2f us per launch (enqueued back to back, until done), %%.2f us launch + synchronize\n", median(t), median(u)))
  io.write(string.format("host backend, empty kernel, 1024 blocks x 256 threads: %%.2f ms (%%d cores)\n", median(g), cupola.device().sms))
]], N // 4, EMPTY))):gsub("\n$", "")))
