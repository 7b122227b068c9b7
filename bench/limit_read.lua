-- bench/limit_read.lua: the limit advise reads from recordings made under a known one (the
-- intervals of bench/results/advise.md): CuPy logs and PyTorch snapshots cupola ships.
--   bin/cupola bench/limit_read.lua
local cupola = require "cupola"
local ca = require "cupola.advise.cupy"
local ta = require "cupola.advise.torch"
for _, c in ipairs{{"fft.limit68089128.jsonl.gz",68089128},{"fft.limit68089128.debug.jsonl.gz",68089128},{"linalg.limit310806958.jsonl.gz",310806958},{"twostream.limit188319744.jsonl.gz",188319744},{"elementwise.limit174690846.jsonl.gz",174690846}} do
  local t = cupola.trace.load("examples/traces/cupy/" .. c[1])
  local t0 = os.clock()
  local lim = ca.recorded_limit(t)
  print(("| %s | %d | %d | %d | %s | %d | %.1f ms |"):format(c[1], c[2], lim.low, lim.high, (lim.low <= c[2] and c[2] <= lim.high) and "yes" or "NO", lim.replays, 1000*(os.clock()-t0)))
end
for _, c in ipairs{{"varlen.oom-default", 1852773580}, {"varlen.oom-expandable", 1852773580}} do
  local t = cupola.trace.load("examples/traces/torch/" .. c[1] .. ".cpsnap.gz")
  local t0 = os.clock()
  local lim = ta.recorded_limit(t, t:info().torch_conf)
  print(("| %s | %d | %d | %d | %s | %d | %.1f ms |"):format(c[1], c[2], lim.low, lim.high, (lim.low <= c[2] and c[2] <= lim.high) and "yes" or "NO", lim.replays, 1000*(os.clock()-t0)))
end
