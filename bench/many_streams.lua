-- bench/many_streams.lua: a trace of many distinct streams replayed in C.
-- Each trace stream gets a stream of its own for the replay, so this
-- measures what a stream costs the replay: its creation and destruction,
-- and the stream lookups of every event query (the host backend used to
-- find a stream by walking all of them: 29.6 s of replay loop for 20,000
-- streams, 8.0 s once they were indexed; bench/results/2026-11-23-host-many-streams.md).
--
--   bin/cupola bench/many_streams.lua [streams] [kind] [reuse]
-- Defaults: 20000 streams, tlsf, the pool's default reuse.  The trace is
-- written to a temporary file: per stream two allocations, one on it and one
-- on the default stream, each freed 64 allocations later on the stream it
-- was made on (4 rows per stream).
local cupola = cupola or require "cupola"

local nstreams = tonumber(arg and arg[1]) or 20000
local kind = arg and arg[2] or "tlsf"
local reuse = arg and arg[3] or nil

local now = require("cupola.core").clock -- monotonic seconds

local path = os.tmpname()
local f = assert(io.open(path, "w"))
f:write "Thread,Time,Action,Pointer,Size,Stream\n"
local t, live, head, tail = 0, {}, 1, 0
for s = 1, nstreams do
  for k = 0, 1 do
    local p = 0x10000000 + (s * 4 + k) * 0x1000
    t = t + 1
    -- The second allocation of each stream is on the default stream, as
    -- most of a real trace is.
    local on = k == 0 and s or 0
    f:write(string.format("0,%d.0,allocate,0x%x,%d,0x%x\n", t, p, 1024 * (1 + p % 7), on))
    tail = tail + 1
    live[tail] = { p, on }
    if tail - head + 1 > 64 then
      local q = live[head]
      live[head], head, t = nil, head + 1, t + 1
      f:write(string.format("0,%d.0,free,0x%x,,0x%x\n", t, q[1], q[2]))
    end
  end
end
for i = head, tail do
  t = t + 1
  f:write(string.format("0,%d.0,free,0x%x,,0x%x\n", t, live[i][1], live[i][2]))
end
f:close()

local t0 = now()
local tr <close> = cupola.trace.load(path)
os.remove(path)
local t1 = now()
local p <close> = cupola.pool { kind = kind, upstream = "virtual", reuse = reuse }
local r = cupola.trace.replay(tr, p, { progress = false })
local t2 = now()
print(string.format("many streams, backend %s: %d streams, %d events, pool %s (reuse %s)",
  cupola.backend(), tr.streams, #tr, kind, p.reuse))
print(string.format("load %.2f s; replay %.2f s in all, of which the loop %.2f s (%.0f ns/event), "
  .. "the rest creating and destroying the streams; failed %d",
  t1 - t0, t2 - t1, r.seconds, r.ns_per_event, r.failed))
