-- Your own allocator in cupola: a buddy allocator written in C as a plugin
-- (examples/plugins/buddy.c, against <cupola/allocator.h>), compiled from its
-- source by the system C compiler (cached), held to cupola's conformance
-- battery, then replayed on a trace recorded from a PyTorch training run
-- beside cupola's tlsf and caching allocators.
--   bin/cupola examples/own_allocator.lua [trace.csv.gz]
local cupola = cupola or require "cupola"
local R = cupola.report

local here = (arg and arg[0] or "examples/own_allocator.lua"):match "^(.*)[/\\]" or "."
local f = assert(io.open(here .. "/plugins/buddy.c"))
local source = f:read "a"
f:close()

-- 1. The same battery cupola's own allocators pass.
local report = cupola.conformance(function(o)
  return cupola.pool { kind = "plugin", source = source, symbol = "buddy_allocator",
    reuse = o.reuse, initial = o.initial, max = o.max }
end)
print("conformance of the buddy plugin: " .. require("cupola.conformance").describe(report))

-- 2. The trace, replayed in C on each pool over the virtual upstream (no
-- memory behind the addresses: traces larger than the device replay too).
local path = arg and arg[1] or assert(cupola.trace.find "gpt2_train")
local t <close> = cupola.trace.load(path)
print(string.format("trace %s: %d events, peak live %s, on backend %s", path, #t, R.bytes(t.peak_live),
  cupola.backend()))
local configs = {
  { "buddy (plugin)", { kind = "plugin", source = source, symbol = "buddy_allocator", upstream = "virtual" } },
  { "tlsf", { kind = "tlsf", upstream = "virtual" } },
  { "caching", { kind = "caching", upstream = "virtual" } },
}
local rows = {}
for i, c in ipairs(configs) do
  local pool <close> = cupola.pool(c[2])
  local r = cupola.trace.replay(t, pool)
  rows[i] = { c[1], R.bytes(r.peak_reserved), string.format("%.3f", r.reserved_over_live),
    string.format("%.1f", r.ns_per_event), r.failed }
end
print(R.table({ "pool", "peak reserved", "reserved/live", "ns/event", "failed" }, rows))
return rows
