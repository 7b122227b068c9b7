-- make demo: the main experiment, as a readable report: the stream-ordered
-- allocation benchmark (cudaMalloc against cudaMallocAsync) and the native
-- pool's configuration walk, on whichever backend this machine has (CUDA, or
-- the host emulation), then where to go next.
local cupola = cupola or require "cupola"
local here = (debug.getinfo(1, "S").source:match "^@(.*/)" or "./")

-- The same first line as the REPL's (bin/cupola): version, backend, device.
print(string.rep("=", 72))
print((require("cupola.help").banner():match "^[^\n]*"))
if cupola.backend() == "host" then
  print("(no CUDA device here: streams run on worker threads and kernels on the CPU,")
  print(" so the times below are this CPU's, not a GPU's)")
end
print(string.rep("=", 72))
print()
local r = dofile(here .. "stream_ordered_alloc.lua")
print()
dofile(here .. "mempool_config.lua")
print()
print(string.format("summary: stream-ordered allocation was %.1fx faster than malloc/free on backend %s",
  r.speedup, cupola.backend()))
print()
print("next:")
print("  bin/cupola                          the REPL; help() lists the API, help \"pool\" one topic")
print("  bin/cupola examples/timeline.lua    a PyTorch snapshot through PyTorch's allocator and two pools")
print("  README.md                           the tour, the examples, and how to run on a GPU")
print("  docs/API.md                         the reference")
