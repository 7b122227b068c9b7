-- The default pool's configuration: a 256 MiB release
-- threshold; used and reserved bytes after each step; a 100 MiB allocation,
-- its free (kept for reuse below the threshold), and a trim to 0.
--   bin/cupola examples/mempool_config.lua
local cupola = cupola or require "cupola"
local MiB = 1024 * 1024

local pool = cupola.mempool.default()
local old_threshold = pool.release_threshold
pool.release_threshold = "256MiB"
pool:trim(0)
local s <close> = cupola.stream()
local steps = {}
local function step(what)
  steps[#steps + 1] = { what, pool.used_current // MiB, pool.reserved_current // MiB }
end

print(string.format("the default pool, configured, on %s", cupola.backend() == "cuda" and cupola.device().name
  or "the host backend"))
print(string.format("  release threshold set to %d MiB", pool.release_threshold // MiB))
step "start"
local b = cupola.malloc_async("100MiB", s)
s:synchronize()
step "after 100 MiB alloc"
b:free(s)
s:synchronize()
step "after free (kept below the threshold)"
pool:trim(0)
step "after trim(0)"
print(cupola.report.table({ "step", "used MiB", "reserved MiB" }, steps))
pool.release_threshold = old_threshold

return steps
