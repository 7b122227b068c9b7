-- make demo: the main experiment, as a readable report.  Runs the seeds'
-- stream-ordered allocation benchmark and the pool configuration walk on
-- whichever backend this machine has (CUDA, or the host emulation).
local cupola = cupola or require "cupola"
local here = (debug.getinfo(1, "S").source:match "^@(.*/)" or "./")

local d = cupola.device()
print(string.rep("=", 72))
print(string.format("cupola %s demo: backend %s, device %s", cupola.version, cupola.backend(), d.name))
print(string.format("memory %s, %d %s, compute capability %s", cupola.report.bytes(d.memory), d.sms,
  cupola.backend() == "cuda" and "SMs" or "CPUs", d.cc))
if cupola.backend() == "host" then
  print("(no CUDA device: the host backend runs streams on worker threads and kernels on the CPU;")
  print(" its timings describe this CPU, not a GPU)")
end
print(string.rep("=", 72))
print()
local r = dofile(here .. "stream_ordered_alloc.lua")
print()
dofile(here .. "mempool_config.lua")
print()
print(string.format("summary: stream-ordered allocation was %.1fx faster than malloc/free on backend %s",
  r.speedup, cupola.backend()))
