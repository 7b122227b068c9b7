-- bench/snapshot_replay.lua: the shipped PyTorch snapshot replayed through
-- every pool kind, on real device memory (upstream "device") and on the
-- virtual upstream, beside PyTorch's own reserved figure; and one refusal on
-- a capped device pool, to show the out-of-memory explanation there.
--   bin/cupola bench/snapshot_replay.lua
local cupola = require "cupola"

local t <close> = cupola.trace.load(assert(cupola.trace.find "torch_snapshot_mlp"))
print(string.format("backend %s, device %s", cupola.backend(), cupola.device().name))
print(string.format("snapshot: %d events, %d allocations, peak live %s, PyTorch peak reserved %s",
  #t, t.allocs, cupola.report.bytes(t.peak_live), cupola.report.bytes(t.torch_peak_reserved)))
local rows = {}
for _, up in ipairs { "device", "virtual" } do
  for _, kind in ipairs { "arena", "freelist", "tlsf", "caching" } do
    local best
    for _ = 1, 5 do
      local p <close> = cupola.pool { kind = kind, upstream = up }
      local r = cupola.trace.replay(t, p)
      if not best or r.ns_per_event < best.ns_per_event then best = r end
    end
    rows[#rows + 1] = { kind, up, best.ns_per_event, best.reserved_over_live, best.torch_reserved_over_live,
      best.failed }
  end
end
print(cupola.report.table({ "kind", "upstream", "ns/event (best of 5)", "reserved/live", "torch reserved/live",
  "failed" }, rows))
local p <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "64MiB", grow = false }
local a = p:alloc "16MiB"
local b = p:alloc "16MiB"
local c = p:alloc "16MiB"
b:free()
print("refusal:", select(2, p:alloc "40MiB"))
a:free(); c:free()
